"""The learner's settings: ``RATCHET_<FIELD>`` environment variables or the ``[learner]`` TOML table."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ingest import topics
from ingest.config import load
from learner.advantages import AdvantageParams
from learner.objective import ObjectiveParams


def _state_root() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "ratchet"


@dataclass(frozen=True)
class LearnerSettings:
    kafka_bootstrap: str = "127.0.0.1:19092"  # Kafka bootstrap servers, host:port[,host:port...]
    rewarded_topic: str = topics.REWARDED  # the topic of rewarded sessions it trains on
    learner_group: str = "ratchet-learner"  # consumer group whose committed offsets mirror the checkpoint
    # a topic that does not match the checkpoint (recreated, truncated): "refuse" to start, or
    # start over at its "earliest" offsets keeping the ledger (learner/positions.py)
    offset_reset: str = "refuse"
    model_dir: Path | None = None  # the base model's Hugging Face folder (required)
    base_model: str = "smollm2-135m-instruct"  # recorded in each adapter's manifest
    # the adapter store it publishes versions to (shared with the gate and the serving controller)
    adapter_store_dir: Path = field(default_factory=lambda: _state_root() / "adapters")
    # checkpoints (adapter, optimizer, offsets, baselines) and the ledger; one learner per folder
    learner_state_dir: Path = field(default_factory=lambda: _state_root() / "learner")
    # MLflow server; unset: none (`ratchet learner run`: the local stack's, unless it is set to "none")
    mlflow_url: str | None = None
    mlflow_experiment: str = "ratchet-learner"  # MLflow experiment, one run per publishing window
    # following the gate (learner/lineage.py): decisions are read from this registered model in MLflow
    registered_model: str = "ratchet-policy"  # the gate's registered model (its champion alias and tags)
    follow_champion: bool = True  # after a rejection or rollback on its line, continue from the champion
    follow_every_s: float = 10.0  # read the gate's decisions at most this often
    # ... except after a rejection that only fell short of the gate's required gain (a positive mean
    # gain, every other check passed): up to this many such versions in a row stay on the line, so the
    # next candidate builds on them (0: rebase after every rejection)
    keep_short_rejections: int = 2
    # LoRA and optimiser
    lora_rank: int = 16  # LoRA rank r (vLLM's --max-lora-rank must be at least this)
    lora_alpha: int = 32  # LoRA alpha (scale alpha/r)
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")  # modules that get LoRA
    learning_rate: float = 1e-4  # AdamW learning rate
    weight_decay: float = 0.0  # AdamW weight decay
    grad_clip: float = 1.0  # gradient norm clip
    lora_seed: int = 0  # torch seed of the LoRA initialisation
    torch_threads: int = 0  # CPU threads of torch; 0: torch's default
    # micro-batches
    batch_tokens: int = 4096  # close a micro-batch at about this many tokens (estimated from record size)
    batch_sessions: int = 16  # ... or at this many records
    batch_wait_s: float = 10.0  # ... or this long after its first record
    # dynamic sampling: a micro-batch takes more records (for up to batch_wait_s more) until at least
    # this many of its sessions would train; groups whose sessions all scored alike teach nothing
    # (no_signal), and an update on a group or two is mostly noise. 0: off
    batch_min_trained: int = 0
    max_row_tokens: int = 4096  # a turn longer than this is skipped (too_long)
    quality_check: bool = True  # great-expectations check of each micro-batch (ingest.quality)
    # objective

    # C: truncation of the importance weight pi_prox / pi_vllm (policy lag)
    weight_cap: float = ObjectiveParams.weight_cap
    # delta: a token whose |log mismatch weight| exceeds it carries no loss
    mismatch_log_bound: float = ObjectiveParams.mismatch_log_bound
    eps_low: float = ObjectiveParams.eps_low  # lower clip of the staleness ratio: 1 - eps_low
    eps_high: float = ObjectiveParams.eps_high  # upper clip of the staleness ratio: 1 + eps_high
    kl_coef: float = ObjectiveParams.kl_coef  # beta: weight of the KL anchor to the base model
    # the exact KL anchor runs the base model only on this fraction of the rows served by an adapter
    # (drawn per micro-batch, each counted 1/fraction times: an unbiased estimate; 1: every row)
    kl_row_fraction: float = 0.25
    max_staleness: int = 4  # K: sessions served more than K versions from the learner's head are dropped
    max_staleness_s: float = 3600.0  # ... and sessions recorded longer ago than this (seconds)
    # advantages

    # decay of the running reward mean and variance per task family
    baseline_decay: float = AdvantageParams.baseline_decay
    # a family's signal is a baseline once it has this many values
    baseline_min_count: int = AdvantageParams.min_count
    # running (family, signal) statistics kept, least recently updated dropped
    max_baselines: int = AdvantageParams.max_baselines
    advantage_std_floor: float = AdvantageParams.std_floor  # advantages are divided by max(std, this)
    advantage_clip: float = AdvantageParams.clip  # advantages are clipped to [-this, this]
    # negative advantages are scaled by this (0: learn from successes only)
    negative_advantage_weight: float = AdvantageParams.negative_weight
    epochs_per_batch: int = (
        1  # optimisation steps per micro-batch (the staleness clip bounds how far they go)
    )
    grad_chunk_tokens: int = 1024  # rows run and back-propagated in chunks of ~this many positions, summed into one step (~2 MB a position; 0: all at once)
    # a micro-batch whose fresh rewards differ in nothing but cost trains nothing, and a task's group
    # within it that does so is left out of the update (no policy gradient against its group baseline)
    skip_uniform_batches: bool = True
    # publishing
    publish_every_updates: int = 8  # N: publish a version after this many updates ...
    publish_every_s: float = 600.0  # T: ... or this long after the last one (with updates since)
    adapter_cache_size: int = 4  # recent versions kept loaded for π_train(v_old)
    keep_checkpoints: int = 2  # checkpoints kept in learner_state_dir
    keep_published_optimizers: int = 16  # AdamW states of the latest published versions, for rebasing
    learner_health_host: str = "127.0.0.1"  # bind address of GET /health and /metrics (ingest/health.py)
    learner_health_port: int = 0  # port of /health and /metrics; 0: off (the local stack sets 18310)
    learner_health_stale_s: float = 900.0  # /health answers 503 once the loop has not beaten this long

    def __post_init__(self) -> None:
        if self.batch_min_trained < 0:
            raise ValueError(f"batch_min_trained is {self.batch_min_trained}: it must be >= 0 (0: off)")
        if self.keep_short_rejections < 0:
            raise ValueError(
                f"keep_short_rejections is {self.keep_short_rejections}: it must be >= 0 "
                "(0: rebase after every rejection)"
            )
        if not 0.0 < self.kl_row_fraction <= 1.0:
            raise ValueError(f"kl_row_fraction is {self.kl_row_fraction}: it must be in (0, 1]")

    def objective_params(self) -> ObjectiveParams:
        return ObjectiveParams(
            weight_cap=self.weight_cap,
            mismatch_log_bound=self.mismatch_log_bound,
            eps_low=self.eps_low,
            eps_high=self.eps_high,
            kl_coef=self.kl_coef,
        )

    def advantage_params(self) -> AdvantageParams:
        return AdvantageParams(
            baseline_decay=self.baseline_decay,
            min_count=self.baseline_min_count,
            std_floor=self.advantage_std_floor,
            clip=self.advantage_clip,
            negative_weight=self.negative_advantage_weight,
            max_baselines=self.max_baselines,
        )


def load_settings(**overrides) -> LearnerSettings:
    return load(LearnerSettings, "learner", **overrides)
