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
    kafka_bootstrap: str = "127.0.0.1:19092"
    rewarded_topic: str = topics.REWARDED
    learner_group: str = "ratchet-learner"  # consumer group whose committed offsets mirror the checkpoint
    model_dir: Path | None = None  # the base model's Hugging Face folder (required)
    base_model_name: str = "smollm2-135m-instruct"  # recorded in each adapter's manifest
    adapter_store_dir: Path = field(default_factory=lambda: _state_root() / "adapters")
    learner_state_dir: Path = field(default_factory=lambda: _state_root() / "learner")
    mlflow_url: str | None = None  # None: no MLflow logging
    mlflow_experiment: str = "ratchet-learner"
    # LoRA and optimiser
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")
    learning_rate: float = 1e-4
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    seed: int = 0
    torch_threads: int = 0  # 0: torch's default
    # micro-batches
    batch_tokens: int = 4096  # close a micro-batch at about this many tokens (estimated from record size)
    batch_sessions: int = 16  # ... or this many records
    batch_wait_s: float = 10.0  # ... or this long after its first record
    max_row_tokens: int = 4096  # a turn longer than this is skipped (too_long)
    quality_check: bool = True  # great-expectations check of each micro-batch (ingest.quality)
    # objective
    mismatch_cap: float = 2.0
    mismatch_log_bound: float = 0.5
    eps_low: float = 0.2
    eps_high: float = 0.28
    kl_coef: float = 0.02
    max_staleness: int = 4  # K: sessions more than K adapter versions old are dropped
    # advantages
    baseline_decay: float = 0.95
    baseline_min_count: int = 4
    advantage_std_floor: float = 0.1
    advantage_clip: float = 5.0
    skip_uniform_batches: bool = True  # a micro-batch whose fresh rewards are all equal trains nothing
    # publishing
    publish_every_updates: int = 8  # N
    publish_every_s: float = 600.0  # T
    adapter_cache_size: int = 4  # recent versions kept loaded for π_train(v_old)
    keep_checkpoints: int = 2

    def objective_params(self) -> ObjectiveParams:
        return ObjectiveParams(
            mismatch_cap=self.mismatch_cap,
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
        )


def load_settings(**overrides) -> LearnerSettings:
    return load(LearnerSettings, "learner", **overrides)
