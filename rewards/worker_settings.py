"""Settings of the rewards stream worker: ``RATCHET_<FIELD>`` or ``[rewards]`` in ``RATCHET_CONFIG``."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from ingest.config import ConfigError, load
from rewards.join import JoinRules


def _default_state_dir() -> Path:
    return Path(os.environ.get("XDG_STATE_HOME", Path.home() / ".local" / "state")) / "ratchet"


@dataclasses.dataclass(frozen=True)
class StreamSettings:
    kafka_bootstrap: str = "127.0.0.1:19092"  # Kafka bootstrap servers, host:port[,host:port...]
    rewards_group_id: str = "ratchet-rewards"  # consumer group; its floors live in "<group>.floor"
    # the join
    join_wait_s: float = JoinRules.join_wait_s  # emit revision 0 this long after the session at the latest
    # revision 0 waits for a feedback (in-line or late), at most join_wait_s
    expect_feedback: bool = JoinRules.expect_feedback
    # revision 0 waits for an outcome (in-line or late), at most join_wait_s
    expect_outcome: bool = JoinRules.expect_outcome
    amend_window_s: float = JoinRules.amend_window_s  # after the wait, late signals still amend for this long
    # a signal waits this long for its session, then is dead-lettered
    orphan_ttl_s: float = JoinRules.orphan_ttl_s
    clock_idle_s: float = JoinRules.clock_idle_s  # an input partition quiet this long follows the wall clock
    # the loop
    rewards_batch_max: int = 2000  # records per fetch
    rewards_sweep_interval_s: float = 0.5  # deadlines are checked this often
    rewards_commit_interval_s: float = 2.0  # input offsets (and floors) are committed this often
    rewards_session_timeout_s: float = 10.0  # consumer group session timeout (2-6 s in tests)
    rewards_metrics_host: str = "127.0.0.1"  # bind address of /metrics
    rewards_metrics_port: int = 19101  # Prometheus /metrics; 0 = off
    rewards_log_every_s: float = 10.0  # progress line period
    # faust's data folder is <state_dir>/rewards/<group>
    state_dir: Path = dataclasses.field(default_factory=_default_state_dir)

    def __post_init__(self) -> None:
        if self.rewards_batch_max < 1:
            raise ConfigError(f"rewards_batch_max must be >= 1, got {self.rewards_batch_max}")
        for name in ("rewards_sweep_interval_s", "rewards_commit_interval_s", "rewards_session_timeout_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        try:
            self.rules()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None

    def rules(self) -> JoinRules:
        return JoinRules(
            join_wait_s=self.join_wait_s,
            amend_window_s=self.amend_window_s,
            orphan_ttl_s=self.orphan_ttl_s,
            expect_feedback=self.expect_feedback,
            expect_outcome=self.expect_outcome,
            clock_idle_s=self.clock_idle_s,
        )


def load_stream_settings(**overrides: Any) -> StreamSettings:
    return load(StreamSettings, "rewards", **overrides)
