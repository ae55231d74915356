"""python -m ops.bench learning [--json FILE] [--quick]: how fast Ratchet learns, against the plainest loop.

Two arms get the same wall-clock budget, the same tasks in the same order (training
split of one task family), the same prompts, temperature and LoRA recipe, on one
private stack (broker, MLflow, vLLM) that this benchmark starts and stops:

- ``ratchet``: the traffic simulator sends sessions through the real capture proxy;
  the real reward worker scores them, the real learner process (configured only by
  ``RATCHET_*`` variables) trains and publishes versions, and the real serving
  controller hot-loads each new version and routes the following traffic to it. No
  gate: the benchmark moves the MLflow ``champion`` alias to every version the
  learner publishes, as a gate that promotes everything would.
- ``bare``: ``ops.bench._bare_rl``, a synchronous sample → verify → policy-gradient
  → new adapter loop on the same vLLM; no Kafka, no gate.

Then both final adapters (with ``--curve K`` also K earlier ones per arm) and the base
model (served as an all-zero adapter, as the gate serves it) are evaluated afresh on the gate's held-out suite of the family, with
95 % bootstrap intervals over tasks. ``gain_per_min`` is (final − base) pass@1 per
minute of budget; ``ratio`` is Ratchet's over the bare loop's (mean over seeds).

With ``--family honeypot`` the simulated environment's outcome check accepts the
answer key's value, so reading the key pays unless a hack detector catches it
(``--detectors off`` runs the reward worker with none); the evaluation reports
``hack_rate``. The bare arm always scores with the gate's verifier. The base policy
never reads the honeypot's key; ``--family lure`` poses the same problems with a
second example that reads a file the question names, so it reads the key in a few
percent of its answers and the shortcut can be learned (held-out: 48 ``lure`` tasks).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

from ops.bench import exit_on_sigterm, machine
from ops.bench._ratchet_arm import Promoter, answer_checked_simulator, wait_for_learner
from ops.bench.learning_report import (
    Point,
    Scored,
    arm_entry,
    assemble,
    git_commit,
    heldout,
    pick,
)

# task family -> its held-out suite (the gate's, or for "lure" one generated on demand)
FAMILIES = {"calculator": "target", "honeypot": "honeypot", "lure": "lure"}
SHORTCUT_FAMILIES = ("honeypot", "lure")  # reading the answer key fools the environment's outcome check
ARMS = ("ratchet", "bare")
RATCHET_STAGES = ("ingest", "proxy", "rewards", "learner", "serving")


@dataclasses.dataclass(frozen=True)
class LearningConfig:
    family: str = "calculator"
    seeds: int = 3
    minutes: float = 15.0  # wall-clock budget per arm and seed
    arms: tuple[str, ...] = ARMS
    negative_weight: float = 1.0  # RATCHET_NEGATIVE_ADVANTAGE_WEIGHT of the learner
    detectors: bool = True  # the reward worker's hack detectors (off: RATCHET_HACK_DETECTORS empty)
    eval_tasks: int = 48  # held-out tasks evaluated (0: the whole suite)
    eval_samples: int = 0  # completions per held-out task (0: the suite's own, 3 for the target)
    prompts_per_round: int = 8  # tasks per bare round; the learner's micro-batch is this x group_size
    group_size: int = 4  # sessions (samples) per task
    temperature: float = 0.7
    max_tokens: int = 40  # of the tool-call turn
    learning_rate: float = 1e-3
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    epochs: int = 1  # optimisation steps per micro-batch (learner) and per round (bare)
    # the learner's staleness bound in versions; it publishes a version per update, so 1 keeps its data
    # at most one update behind, as near on-policy as the bare loop's (traffic outruns the learner)
    max_staleness: int = 1
    kl_coef: float | None = None  # the learner's KL anchor weight beta; None: the learner's default
    # the learner divides a session's advantage by max(its group's spread, this); None: the learner's
    # default (0.1), which rescales a [1, 1, 1, 0] group to the size of a 50/50 one. At 1 the
    # advantages stay the centred rewards the bare loop uses, but they are then ~2.5x smaller next to
    # the KL anchor: seed 0 ended at 0.771 held-out instead of 0.979 (README, the ablation)
    advantage_std_floor: float | None = None
    # the learner's batch_min_trained: a micro-batch takes more records until at least this many of its
    # sessions would train (dynamic sampling); None: half a micro-batch (16 of 8 x 4); 0: off, each
    # micro-batch is prompts_per_round x group_size records whatever they teach
    min_trained: int | None = None
    # sessions in flight in the ratchet arm; 0: prompts_per_round x group_size, the sequences a bare
    # round keeps in flight, so both arms load vLLM alike (4 ran vLLM at a quarter of its throughput)
    sim_concurrency: int = 0
    torch_threads: int = 1  # of the learner and the bare loop (2 threads ran 4-5x slower than 1 here)
    # niceness of the one vLLM both arms share: the ratchet arm's learner goes first when it and the
    # traffic want the same core (the bare arm never trains while vLLM samples, so it is not affected)
    vllm_nice: int = 10
    eval_concurrency: int = 16
    curve: int = 0  # intermediate versions per arm also evaluated (evenly spaced), besides the final one
    bootstrap_samples: int = 2000

    @property
    def trained_per_update(self) -> int:
        """The learner's ``batch_min_trained``: ``min_trained``, or half a micro-batch."""
        half = self.prompts_per_round * self.group_size // 2
        return half if self.min_trained is None else self.min_trained

    @property
    def suite(self) -> str:
        return FAMILIES[self.family]

    def learner_env(self, seed: int) -> dict[str, str]:
        """The learner's recipe, as ``RATCHET_*`` variables (its settings are the only interface used)."""
        return {
            "RATCHET_LORA_SEED": str(seed),
            "RATCHET_LEARNING_RATE": str(self.learning_rate),
            "RATCHET_LORA_RANK": str(self.lora_rank),
            "RATCHET_LORA_ALPHA": str(self.lora_alpha),
            "RATCHET_LORA_TARGETS": ",".join(self.lora_targets),
            "RATCHET_EPOCHS_PER_BATCH": str(self.epochs),
            "RATCHET_MAX_STALENESS": str(self.max_staleness),
            "RATCHET_NEGATIVE_ADVANTAGE_WEIGHT": str(self.negative_weight),
            **({"RATCHET_KL_COEF": str(self.kl_coef)} if self.kl_coef is not None else {}),
            **(
                {"RATCHET_ADVANTAGE_STD_FLOOR": str(self.advantage_std_floor)}
                if self.advantage_std_floor is not None
                else {}
            ),
            "RATCHET_BATCH_SESSIONS": str(self.prompts_per_round * self.group_size),
            "RATCHET_BATCH_TOKENS": str(self.prompts_per_round * self.group_size * 1024),  # sessions decide
            "RATCHET_BATCH_WAIT_S": "60",
            "RATCHET_BATCH_MIN_TRAINED": str(self.trained_per_update),
            "RATCHET_PUBLISH_EVERY_UPDATES": "1",  # every update is served to the following traffic
            "RATCHET_PUBLISH_EVERY_S": "100000",
            "RATCHET_TORCH_THREADS": str(self.torch_threads),
        }


QUICK = {"seeds": 1, "minutes": 3.0, "eval_tasks": 12, "eval_samples": 1, "prompts_per_round": 1}


def parse_args(argv: Sequence[str]) -> tuple[LearningConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="python -m ops.bench learning",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the report here")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="1 seed, 3 minutes per arm, 12 held-out tasks x 1 sample, 1 prompt (x 4 samples) a round",
    )
    parser.add_argument("--seeds", type=int, help="seeds, each a full pair of arms (default 3)")
    parser.add_argument("--minutes", type=float, help="wall-clock budget per arm and seed (default 15)")
    parser.add_argument("--arm", choices=("ratchet", "bare", "both"), default="both")
    parser.add_argument(
        "--negative-weight", type=float, default=1.0, help="the learner's negative advantage weight"
    )
    parser.add_argument(
        "--max-staleness", type=int, default=1, help="the learner's staleness bound in versions (default 1)"
    )
    parser.add_argument(
        "--kl-coef", type=float, help="the learner's KL anchor weight (default: the learner's, 0.02)"
    )
    parser.add_argument(
        "--advantage-std-floor",
        type=float,
        default=LearningConfig.advantage_std_floor,
        help="ablation: advantages are divided by max(the group's spread, this) (default: the "
        "learner's, 0.1; 1 keeps the centred 0/1 rewards, as the bare loop does)",
    )
    parser.add_argument(
        "--min-trained",
        type=int,
        default=None,
        help="the learner's micro-batch takes more records until this many of its sessions would "
        "train (dynamic sampling; default: half a micro-batch, 16 of 8 x 4; 0: off)",
    )
    parser.add_argument("--family", choices=sorted(FAMILIES), default="calculator")
    parser.add_argument("--detectors", choices=("on", "off"), default="on", help="reward hack detectors")
    parser.add_argument("--eval-tasks", type=int, help="held-out tasks evaluated (default 48; 0: all)")
    parser.add_argument("--eval-samples", type=int, help="samples per held-out task (default: the suite's)")
    parser.add_argument("--prompts-per-round", type=int, help="tasks per round / micro-batch (default 8)")
    parser.add_argument(
        "--sim-concurrency",
        type=int,
        default=0,
        help="ratchet arm: sessions in flight (default: prompts per round x 4, as many as a bare round)",
    )
    parser.add_argument(
        "--vllm-nice",
        type=int,
        default=LearningConfig.vllm_nice,
        help=f"CPU niceness of vLLM, 0-19 (default {LearningConfig.vllm_nice}: the learner first)",
    )
    parser.add_argument(
        "--curve", type=int, default=0, help="also evaluate this many intermediate versions per arm"
    )
    parser.add_argument(
        "--combine",
        type=Path,
        nargs="+",
        metavar="REPORT",
        help="run nothing: merge reports of the same commit and settings that ran different arms "
        "(say --arm ratchet and --arm bare) into one, with the ratio over both (to --json or stdout)",
    )
    parser.add_argument("--work-dir", type=Path, help="state, logs and adapters (default: a new temp folder)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder afterwards")
    args = parser.parse_args(list(argv))
    sized = {
        "seeds": args.seeds,
        "minutes": args.minutes,
        "eval_tasks": args.eval_tasks,
        "eval_samples": args.eval_samples,
        "prompts_per_round": args.prompts_per_round,
    }
    for name, value in sized.items():
        if value is None:
            sized[name] = QUICK[name] if args.quick else getattr(LearningConfig, name)
    if sized["seeds"] < 1 or sized["prompts_per_round"] < 1 or sized["minutes"] <= 0:
        parser.error("--seeds and --prompts-per-round must be >= 1 and --minutes > 0")
    if sized["eval_tasks"] < 0 or sized["eval_samples"] < 0:
        parser.error("--eval-tasks and --eval-samples must be >= 0")
    if not 0 <= args.vllm_nice <= 19:
        parser.error("--vllm-nice must be a niceness from 0 to 19")
    if args.advantage_std_floor is not None and not args.advantage_std_floor > 0:
        parser.error("--advantage-std-floor must be > 0 (advantages are divided by it)")
    config = LearningConfig(
        family=args.family,
        arms=ARMS if args.arm == "both" else (args.arm,),
        negative_weight=args.negative_weight,
        max_staleness=args.max_staleness,
        kl_coef=args.kl_coef,
        advantage_std_floor=args.advantage_std_floor,
        min_trained=None if args.min_trained is None else max(0, args.min_trained),
        detectors=args.detectors == "on",
        curve=max(0, args.curve),
        sim_concurrency=max(0, args.sim_concurrency),
        vllm_nice=args.vllm_nice,
        **sized,
    )
    return config, args


# --- the benchmark -----------------------------------------------------------------------------


class Bench:
    def __init__(self, config: LearningConfig, root: Path, say: Callable[[str], None]):
        from ops.pipeline import on_free_ports
        from ops.stack import Stack, StackSettings, free_port
        from ops.stack import load_settings as load_stack_settings

        self.config, self.root, self.say = config, root, say
        base = load_stack_settings()
        self.stack_settings = StackSettings(
            state_dir=root / "stack",
            cache_dir=base.cache_dir,
            vllm_python=base.vllm_python,
            model_dir=base.model_dir,
            base_model=base.base_model,
            broker_port=free_port(),
            mlflow_port=free_port(),
            vllm_port=free_port(),
            s3_port=free_port(),
            # one core, the last: "auto" pins vLLM to core 0, where every other stack's vLLM sits too
            vllm_cpu_bind=str((os.cpu_count() or 1) - 1),
            vllm_nice=config.vllm_nice,
        )
        self.ps = on_free_ports()
        self.arm_env: dict[str, str] = {}
        self.stack = Stack(self.stack_settings, progress=say, stages=self._stages)

    def _stages(self, stack):
        from ops.pipeline import stages

        return [
            dataclasses.replace(c, env={**c.env, **self.arm_env})
            for c in stages(self.ps)(stack)
            if c.name in RATCHET_STAGES
        ]

    @property
    def model_dir(self) -> Path:
        from ops.model import prepare_model

        return self.stack_settings.model_dir or prepare_model(self.stack_settings.cache_dir)

    def unload(self, prefix: str) -> None:
        """Unload every adapter on vLLM whose name starts with ``prefix``."""
        import httpx

        from serving.vllm_admin import VLLMClient, VLLMError

        client = VLLMClient(self.stack_settings.vllm_url)
        try:
            for name in client.models():
                if name.startswith(prefix):
                    with contextlib.suppress(VLLMError, httpx.HTTPError):
                        client.unload_adapter(name)
        finally:
            client.close()

    def ratchet(self, seed: int) -> dict:
        from learner.store import AdapterStore
        from ops.config_reference import check_environment
        from ops.simulator import Simulator
        from ops.simulator import load_settings as load_sim_settings

        c, s, ps = self.config, self.stack_settings, self.ps
        tag = f"s{seed}-{uuid.uuid4().hex[:6]}"
        state = self.root / f"ratchet-seed{seed}"
        prefix = f"ratchet{seed}"
        registered = f"bench-learning-{tag}"
        self.arm_env = {
            "RATCHET_STATE_DIR": str(state),
            "RATCHET_ADAPTER_STORE_DIR": str(state / "adapters"),
            "RATCHET_LEARNER_STATE_DIR": str(state / "learner"),
            "RATCHET_REGISTERED_MODEL": registered,
            "RATCHET_ADAPTER_PREFIX": prefix,
            "RATCHET_LEARNER_GROUP": f"learner-{tag}",
            "RATCHET_REWARDS_GROUP_ID": f"rewards-{tag}",
            "RATCHET_EXPECT_OUTCOME": "true",
            **c.learner_env(seed),
            **({} if c.detectors else {"RATCHET_HACK_DETECTORS": ""}),
        }
        unknown = check_environment(self.arm_env)
        if unknown:  # a renamed setting would be silently ignored by the stage that no longer reads it
            raise RuntimeError("; ".join(unknown))
        self.stack.stop("broker")  # memory storage: a fresh broker has empty topics
        self.stack.up(["broker"])
        learner_log = self.stack.log_path("learner")
        log_start = learner_log.stat().st_size if learner_log.exists() else 0
        self.stack.up(list(RATCHET_STAGES))
        wait_for_learner(self.stack, learner_log, log_start)
        from gating.records import create_decision_key, read_decision_key
        from ops.pipeline import decision_key_path

        key = read_decision_key(create_decision_key(decision_key_path(self.stack_settings.state_dir)))
        promoter = Promoter(s.mlflow_url, registered, state / "adapters", self.say, key)
        promoter.start()
        sim_settings = load_sim_settings(
            proxy_url=f"http://{s.host}:{ps.proxy_port}",
            ingest_url=f"http://{s.host}:{ps.ingest_port}",
            sim_tenant=ps.tenant,
            sim_token=ps.tenant_token,
            sim_mix={c.family: "1"},
            sim_seed=seed,
            sim_concurrency=c.sim_concurrency or c.prompts_per_round * c.group_size,
            sim_group_size=c.group_size,
            sim_temperature=c.temperature,
            sim_max_tokens=c.max_tokens,
            sim_followup_max_tokens=0,  # one turn a session: the same work as a bare sample
            sim_feedback_rate=0.0,  # the verifier's outcome is the signal, as in the bare arm
        )
        simulator_class = answer_checked_simulator(Simulator) if c.family in SHORTCUT_FAMILIES else Simulator
        sim = simulator_class(sim_settings, progress=lambda m: self.say(f"ratchet: {m}"))
        self.say(f"ratchet seed {seed}: {c.minutes:g} minutes of {c.family} traffic through the proxy")
        started = time.time()
        try:
            asyncio.run(sim.run(duration_s=c.minutes * 60))
        finally:
            deadline = started + c.minutes * 60
            promoter.stop.set()
            promoter.join(30)
            for name in reversed(RATCHET_STAGES):
                self.stack.stop(name, timeout_s=5)
            self.unload(f"{prefix}-")
        store = AdapterStore(state / "adapters")
        published = [(v, store.get(v)) for v in store.versions()]
        in_budget = [(v, a) for v, a in published if a.manifest.created_at <= deadline]
        results = [r for r in sim.results if r.ended_at <= deadline]
        first_served: dict[str, float] = {}
        for r in sorted(results, key=lambda r: r.ended_at):
            first_served.setdefault(r.adapter_version or "base", r.ended_at)
        by_version = Counter(r.adapter_version or "base" for r in results)
        passed_by_version = Counter(r.adapter_version or "base" for r in results if r.passed)
        ledger = state / "learner" / "ledger.jsonl"
        outcomes = Counter(
            json.loads(line).get("outcome")
            for line in (ledger.read_text().splitlines() if ledger.exists() else [])
        )
        final = in_budget[-1][1] if in_budget else None
        return {
            "points": [
                Point(round((a.manifest.created_at - started) / 60, 3), v, a.path) for v, a in in_budget
            ],
            "minutes": c.minutes,
            "versions": len(in_budget),
            "sessions": len(results),
            "extra": {
                "final_adapter": final.version if final else None,
                "published": [
                    {
                        "version": v,
                        "minute": round((a.manifest.created_at - started) / 60, 2),
                        "first_served_minute": round((first_served[v] - started) / 60, 2)
                        if v in first_served
                        else None,
                    }
                    for v, a in published
                ],
                "train_success": {
                    v: {"sessions": n, "success": round(passed_by_version[v] / n, 3)}
                    for v, n in by_version.items()
                },
                "shortcuts": sum(r.shortcut for r in results),
                "simulator_errors": dict(sim.errors),
                "learner_outcomes": dict(outcomes),
            },
        }

    def bare(self, seed: int) -> dict:
        from ops.bench._bare_rl import BareConfig, run

        c = self.config
        cfg = BareConfig(
            model_dir=self.model_dir,
            vllm_url=self.stack_settings.vllm_url,
            base_model=self.stack_settings.base_model,
            family=c.family,
            seed=seed,
            minutes=c.minutes,
            prompts_per_round=c.prompts_per_round,
            samples=c.group_size,
            temperature=c.temperature,
            max_tokens=c.max_tokens,
            learning_rate=c.learning_rate,
            lora_rank=c.lora_rank,
            lora_alpha=c.lora_alpha,
            lora_targets=c.lora_targets,
            epochs=c.epochs,
            torch_threads=c.torch_threads,
            adapter_prefix=f"bare{seed}",
        )
        self.say(
            f"bare seed {seed}: {c.minutes:g} minutes of rounds of {c.prompts_per_round} x {c.group_size}"
        )
        result = run(cfg, self.root / f"bare-seed{seed}", lambda m: self.say(m))
        work = self.root / f"bare-seed{seed}"
        return {
            "points": [
                Point(r["minute"], r["adapter"], work / f"r{r['round']}")
                for r in result.rounds
                if r["adapter"]
            ],
            "minutes": c.minutes,
            "versions": sum(r["adapter"] is not None for r in result.rounds),
            "sessions": result.samples,
            "extra": {
                "final_adapter": result.final_adapter.name if result.final_adapter else None,
                "rounds": result.rounds,
            },
        }

    def evaluate(self, seed: int, adapters: dict[str, Path]) -> dict[str, Scored]:
        """Fresh held-out scores of the base model and of each adapter, by label (``gating.heldout``).

        The base model is an all-zero adapter, as the gate serves it; at most three
        policies are loaded at a time.
        """
        from gating.heldout import measure
        from gating.suites import GENERATED, Suite, generated_suite, load_suite
        from learner.store import BASE

        c, s = self.config, self.stack_settings
        suite = generated_suite(c.suite) if c.suite in GENERATED else load_suite(c.suite)
        suite = suite.limited(c.eval_tasks)
        if c.eval_samples:
            suite = Suite(
                dataclasses.replace(suite.config, samples=c.eval_samples), suite.tasks, suite.content_hash
            )
        scores = measure(
            {BASE: None, **adapters},
            suite,
            s.vllm_url,
            s.base_model,
            self.root / f"eval-seed{seed}",
            model_dir=self.model_dir,
            concurrency=c.eval_concurrency,
            say=self.say,
            progress=True,
        )
        if suite.config.verifier == "honeypot":
            return {x: Scored(v[f"{suite.name}.pass"], v[f"{suite.name}.hack"]) for x, v in scores.items()}
        return {x: Scored(v[f"{suite.name}.pass_at_1"]) for x, v in scores.items()}


def main(argv: list[str]) -> int:
    from ops.stack import QUIET_ENV

    config, args = parse_args(argv)
    if args.combine:
        from ops.bench.learning_report import combine

        try:
            report = combine([json.loads(path.read_text()) for path in args.combine])
        except (OSError, ValueError, KeyError) as exc:
            print(f"python -m ops.bench learning --combine: {exc}", file=sys.stderr)
            return 2
        text = json.dumps(report, indent=2, default=str)
        print(text)
        if args.json:
            args.json.write_text(text + "\n")
        return 0
    os.environ.update(QUIET_ENV)
    started, host_start = time.monotonic(), machine()

    def say(message: str) -> None:
        print(f"[learning {time.strftime('%H:%M:%S')} +{(time.monotonic() - started) / 60:.1f}m] {message}",
              file=sys.stderr, flush=True)  # fmt: skip

    exit_on_sigterm(say, "the private stack")  # through the finally below
    root = args.work_dir or Path(tempfile.mkdtemp(prefix="ratchet-bench-learning-"))
    root.mkdir(parents=True, exist_ok=True)
    say(f"work folder {root}; config {json.dumps(dataclasses.asdict(config))}")
    bench = Bench(config, root, say)
    arms: dict[str, list[dict]] = {arm: [] for arm in config.arms}
    ok = False
    try:
        bench.stack.up(["broker", "mlflow", "vllm"])
        for seed in range(config.seeds):
            order = (
                list(config.arms) if seed % 2 == 0 else list(reversed(config.arms))
            )  # alternate who goes first
            runs = {arm: (bench.ratchet if arm == "ratchet" else bench.bare)(seed) for arm in order}
            chosen = {arm: pick(r["points"], config.curve) for arm, r in runs.items()}
            scored = bench.evaluate(
                seed, {f"{arm}-{p.label}": p.path for arm, points in chosen.items() for p in points}
            )
            for arm in config.arms:
                r, points = runs[arm], chosen[arm]
                final = scored[f"{arm}-{points[-1].label}"] if points else scored["base"]
                curve = [
                    {"minute": p.minute, "adapter": p.label, **heldout(scored[f"{arm}-{p.label}"], config.bootstrap_samples)}
                    for p in points
                ]  # fmt: skip
                entry = arm_entry(
                    seed, r["minutes"], r["versions"], r["sessions"], scored["base"], final,
                    config.bootstrap_samples, curve=curve, **r["extra"],
                )  # fmt: skip
                arms[arm].append(entry)
                say(
                    f"seed {seed} {arm}: held-out {entry['heldout_base']['pass_at_1']} -> "
                    f"{entry['heldout_final']['pass_at_1']} ({r['versions']} versions, {r['sessions']} sessions), "
                    f"gain/min {entry['gain_per_min']}"
                )
        ok = True
    finally:
        bench.stack.down()
        if ok and not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        elif not ok:
            say(f"failed; logs and state kept in {root}")
    host = {"start": host_start, "end": machine()}
    report = assemble(arms, config, git_commit(), time.monotonic() - started, host)
    text = json.dumps(report, indent=2, default=str)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0
