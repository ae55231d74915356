"""The learner's publishing window, without MLflow: what a window sums and when it is published."""

import hashlib
import time
from pathlib import Path

import pytest

from learner.advantages import Advantage
from learner.batching import Outcome
from learner.checkpoint import Checkpoint, LearnerState
from learner.publishing import Publisher, optimizer_snapshot
from learner.settings import LearnerSettings
from learner.store import AdapterStore
from tests.learner.conftest import rewarded

METRICS = {"loss": 0.5, "kl": 0.25}


def publisher(tmp_path, **overrides) -> Publisher:
    settings = LearnerSettings(
        adapter_store_dir=tmp_path / "adapters", learner_state_dir=tmp_path / "learner", **overrides
    )
    return Publisher(settings, AdapterStore(settings.adapter_store_dir), print, lambda point: None)


def trained(session_id: str, staleness: int) -> Outcome:
    return Outcome(rewarded(session_id, 1.0), "trained", Advantage(0.5, source="group"), staleness)


def test_a_window_opens_with_its_first_update_and_sums_every_batch(tmp_path):
    pub = publisher(tmp_path)
    state = LearnerState(updates=3, offsets={0: 40, 1: 7})
    pub.account(state, [Outcome(rewarded("s0", 0.0), "no_signal")], None)  # no update: counts only
    assert state.window == {"counts": {"no_signal": 1}}

    state.updates = 4
    pub.account(state, [trained("s1", 1), trained("s2", 0), Outcome(rewarded("s3", 0.0), "stale")], METRICS)
    window = state.window
    origin = "ratchet-learner|rewarded.v1|4|0:40,1:7"
    assert window["key"] == hashlib.sha256(origin.encode()).hexdigest()[:32] and window["first_update"] == 4
    assert window["counts"] == {"no_signal": 1, "trained": 2, "stale": 1}
    assert window["staleness"] == {"1": 1, "0": 1} and window["updates"] == 1
    assert window["last"]["step"] == 4
    assert window["last"]["metrics"] == {**METRICS, "staleness_mean": 0.5, "staleness_max": 1.0}

    state.updates = 5
    pub.account(state, [trained("s4", 1)], METRICS)
    assert window["sums"] == {"loss": 1.0, "kl": 0.5} and window["updates"] == 2
    assert (
        window["staleness"] == {"1": 2, "0": 1}
        and window["key"] == hashlib.sha256(origin.encode()).hexdigest()[:32]
    )


@pytest.mark.parametrize(
    ("updates", "opened_s_ago", "newest", "due"),
    [
        (8, 0, True, True),  # publish_every_updates reached
        (7, 0, True, False),
        (1, 601, True, True),  # publish_every_s passed, with an update since
        (0, 601, True, False),  # nothing new to publish
        (8, 0, False, False),  # only the newest checkpoint is published
    ],
)
def test_a_window_is_published_after_enough_updates_or_time(tmp_path, updates, opened_s_ago, newest, due):
    pub = publisher(tmp_path)
    state = LearnerState(updates=updates, checkpoint=3, window={"opened_at": time.time() - opened_s_ago})
    ckpt = Checkpoint(Path("ckpt"), LearnerState(checkpoint=3 if newest else 2))
    assert pub.due(state, ckpt) is due
    assert not pub.due(state, None)


def test_only_the_latest_optimizer_states_are_kept(tmp_path):
    pub = publisher(tmp_path, keep_published_optimizers=2)
    for n in range(1, 5):
        folder = tmp_path / f"ckpt-{n}"
        folder.mkdir()
        (folder / "optimizer.pt").write_bytes(b"adamw %d" % n)
        pub.keep_optimizer(Checkpoint(folder, LearnerState(checkpoint=n)))
    kept = sorted(p.name for p in optimizer_snapshot(tmp_path / "learner", 0).parent.iterdir())
    assert kept == ["ckpt-00000003.optimizer.pt", "ckpt-00000004.optimizer.pt"]  # nothing half-written left
    assert optimizer_snapshot(tmp_path / "learner", 4).read_bytes() == b"adamw 4"
