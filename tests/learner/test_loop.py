"""The learner loop against the real broker (private topics), MLflow and SmolLM2."""

import contextlib
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from ingest import topics
from learner import checkpoint
from learner.checkpoint import Ledger
from learner.consumer import RewardedConsumer
from learner.loop import run
from learner.store import AdapterStore
from tests.learner.conftest import produce, rewarded, tiny_settings

REPO = Path(__file__).resolve().parents[2]


def committed_offsets(broker: str, topic: str, group: str) -> dict[int, int]:
    consumer = RewardedConsumer(broker, topic, group, {})
    try:
        return {p: o for p, o in consumer.committed().items() if o >= 0}
    finally:
        consumer.close()


def dead_letters_for(broker: str, session_ids: set[str], deadline_s: float = 30.0) -> dict[str, dict]:
    found: dict[str, dict] = {}
    end = time.monotonic() + deadline_s
    with contextlib.closing(topics.read_topic(broker, topics.DLQ, poll_s=0.5)) as batches:
        while time.monotonic() < end and set(found) != session_ids:
            for msg in next(batches):
                if msg.key() and msg.key().decode() in session_ids:
                    found[msg.key().decode()] = json.loads(msg.value())
    return found


def outcomes_of(ledger: list[dict]) -> dict[tuple, str]:
    return {(e["session_id"], e["revision"], e["offset"]): e["outcome"] for e in ledger}


def test_loop_trains_each_session_once_publishes_and_records(
    broker, mlflow_url, model_dir, tmp_path, single_thread
):
    topic = f"rewarded-test-{uuid.uuid4().hex[:10]}"
    topics.ensure_topics(broker, [topics.TopicSpec(topic, 1, 3600_000)])
    settings = tiny_settings(tmp_path, broker, topic, model_dir, mlflow_url=mlflow_url)
    bad_id = f"bad-{uuid.uuid4().hex[:8]}"
    malformed = rewarded(bad_id, 1.0).model_dump(mode="json")
    malformed["session"]["turns"][1]["behaviour_logprobs"] = [-1.0]  # 4 tokens, 1 logprob
    produce(broker, topic, [
        *(rewarded(f"g{i}", float(i % 2 == 0), task_id="t0") for i in range(4)),  # batch 1: a group, update 1
        json.dumps(malformed).encode(),  # batch 2: dead-lettered
        rewarded("g0", 1.0, task_id="t0"),  # redelivered
        rewarded("ex", 1.0, excluded=True),
        rewarded("g1", 1.0, task_id="t0", revision=1),  # the reward of a trained session, revised: update 2
        *(rewarded(f"h{i}", 0.0, task_id="t1") for i in range(4)),  # batch 3: all equal, no update
    ])  # fmt: skip
    state = run(settings, idle_exit_s=3.0, progress=print)

    ledger = Ledger(settings.learner_state_dir / "ledger.jsonl").read()
    assert [(e["session_id"], e["revision"], e["outcome"]) for e in ledger] == [
        ("g0", 0, "trained"), ("g1", 0, "trained"), ("g2", 0, "trained"), ("g3", 0, "trained"),
        (None, None, "malformed"), ("g0", 0, "duplicate"), ("ex", 0, "excluded"), ("g1", 1, "amended"),
        ("h0", 0, "no_signal"), ("h1", 0, "no_signal"), ("h2", 0, "no_signal"), ("h3", 0, "no_signal"),
    ]  # fmt: skip
    amended = ledger[7]
    assert amended["update"] == 2 and amended["advantage"]["value"] == pytest.approx(
        1.0
    )  # was −1: trained +2
    assert state.updates == 2 and state.offsets == {0: 12}
    assert committed_offsets(broker, topic, settings.learner_group) == {0: 12}

    store = AdapterStore(settings.adapter_store_dir)
    assert store.versions() == ["v1"]
    v1 = store.verify("v1")
    assert v1.manifest.parent is None
    assert v1.manifest.data_window["offsets_to"] == {"0": 8} and v1.manifest.data_window["updates"] == 2
    assert {"mean_surrogate", "mean_kl", "mean_clip_fraction", "mean_tokens_per_s"} <= set(
        v1.manifest.metrics
    )

    letter = dead_letters_for(broker, {bad_id})[bad_id]
    assert letter["source"] == "learner" and "behaviour_logprobs" in letter["reason"]

    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name("ratchet-learner")
    (run_info,) = client.search_runs(
        [experiment.experiment_id], f"tags.learner_group = '{settings.learner_group}'"
    )
    assert run_info.data.tags["adapter_version"] == "v1" and run_info.info.status == "FINISHED"
    assert run_info.data.params["lora_rank"] == "4"
    for name in (
        "surrogate",
        "kl",
        "clip_fraction",
        "mismatch_masked_fraction",
        "tokens_per_s",
        "staleness_0",
    ):
        assert name in run_info.data.metrics, name
    assert run_info.data.metrics["staleness_0"] == 5.0  # 4 fresh + 1 amendment, all served by the base model

    # A restart resumes from the checkpoint even where the group's committed offsets lag behind it.
    lagging = RewardedConsumer(broker, topic, settings.learner_group, {})
    lagging.commit({0: 4})
    lagging.close()
    again = run(settings, idle_exit_s=2.0, progress=print)
    assert again.updates == 2 and Ledger(settings.learner_state_dir / "ledger.jsonl").read() == ledger
    assert committed_offsets(broker, topic, settings.learner_group) == {0: 12}

    # One record failing the data-quality suite is quarantined with its reason (ledger and dead-letter
    # topic); the others of its micro-batch are trained. The T-seconds rule (here 0 s) publishes each.
    corrupt = rewarded("q0", 1.0, task_id="t2", behaviour=[-150.0, -1.0, -1.0, -1.0])
    produce(
        broker,
        topic,
        [
            corrupt,
            rewarded("q1", 1.0, task_id="t2"),
            rewarded("q2", 0.0, task_id="t2"),
            # served by v2, which the learner publishes from the update before theirs
            rewarded("r0", 1.0, task_id="t3", version="v2"),
            rewarded("r1", 0.0, task_id="t3", version="v2"),
            rewarded("r2", 1.0, task_id="t3", version="v2"),
        ],
    )
    by_time = dataclasses.replace(settings, batch_sessions=3, publish_every_updates=100, publish_every_s=0.0)
    after = run(by_time, idle_exit_s=3.0, progress=print)
    tail = Ledger(settings.learner_state_dir / "ledger.jsonl").read()[len(ledger) :]
    assert [(e["session_id"], e["outcome"]) for e in tail] == [
        ("q0", "quarantined"), ("q1", "trained"), ("q2", "trained"),
        ("r0", "trained"), ("r1", "trained"), ("r2", "trained"),
    ]  # fmt: skip
    assert "min_logprob" in tail[0]["reason"]
    assert tail[1]["update"] == tail[2]["update"] == 3 and tail[3]["update"] == 4
    assert after.updates == 4 and after.offsets == {0: 18}
    letter = dead_letters_for(broker, {"q0"})["q0"]
    assert "min_logprob" in letter["reason"] and "with its batch" not in letter["reason"]
    assert store.versions() == ["v1", "v2", "v3"]
    v2, v3 = store.verify("v2").manifest, store.verify("v3").manifest
    assert v2.parent == "v1" and v2.data_window["offsets_from"] == {"0": 8}
    assert v2.data_window["offsets_to"] == {"0": 15} and v2.data_window["window_updates"] == 1
    assert v3.parent == "v2" and v3.data_window["offsets_to"] == {"0": 18}
    # the learner's weights were still v2's: of v2's three rows only the one the KL anchor draws
    # (ceil(0.25 x 3), the default KL_ROW_FRACTION) ran as reference, under the base model
    assert v3.metrics["mean_reference_rows"] == 1.0 and v2.metrics["mean_reference_rows"] == 2.0


def test_a_micro_batch_fills_until_enough_sessions_would_train(broker, model_dir, tmp_path, single_thread):
    """Dynamic sampling: a micro-batch whose groups all scored alike takes the next records in,
    until batch_min_trained sessions would train or batch_wait_s has passed."""
    topic = f"rewarded-test-{uuid.uuid4().hex[:10]}"
    topics.ensure_topics(broker, [topics.TopicSpec(topic, 1, 3600_000)])
    produce(broker, topic, [
        *(rewarded(f"h{i}", 0.0, task_id="t1") for i in range(4)),  # one outcome: nothing to learn
        *(rewarded(f"g{i}", float(i % 2), task_id="t0") for i in range(4)),  # a signal
        *(rewarded(f"k{i}", 1.0, task_id="t2") for i in range(4)),  # one outcome, and nothing after
    ])  # fmt: skip
    lines: list[str] = []
    settings = tiny_settings(tmp_path, broker, topic, model_dir, batch_min_trained=4)
    state = run(settings, idle_exit_s=3.0, progress=lines.append)

    assert [line.split(":")[0] for line in lines if line.startswith("batch of")] == [
        "batch of 8",
        "batch of 4",
    ]
    ledger = Ledger(settings.learner_state_dir / "ledger.jsonl").read()
    assert [(e["session_id"][0], e["outcome"], e.get("update")) for e in ledger] == [
        *[("h", "no_signal", None)] * 4, *[("g", "trained", 1)] * 4, *[("k", "no_signal", None)] * 4
    ]  # fmt: skip
    assert state.updates == 1 and state.offsets == {0: 12}

    # without it, the first four are a micro-batch of their own
    plain = tiny_settings(tmp_path / "plain", broker, topic, model_dir, learner_group=f"plain-{topic}")
    lines.clear()
    run(plain, idle_exit_s=3.0, progress=lines.append)
    assert [line.split(":")[0] for line in lines if line.startswith("batch of")] == ["batch of 4"] * 3


def start_learner(env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ops.cli", "learner", "run", "--idle-exit", "4"],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def learner_env(settings, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
        "RATCHET_TORCH_THREADS": "1",
        "RATCHET_QUALITY_CHECK": "false",  # the check has its own test; its import costs seconds per start
        **{
            f"RATCHET_{k.upper()}": ",".join(v) if isinstance(v, tuple) else str(v)
            for k, v in vars(settings).items()
            if v is not None
        },
        **({} if settings.mlflow_url else {"RATCHET_MLFLOW_URL": "none"}),  # no MLflow, not the stack's
        **extra,
    }


def test_kill_9_anywhere_trains_every_session_exactly_once(broker, topic, model_dir, tmp_path):
    """SIGKILL the learner right after random progress markers (mid-publish, between checkpoint and
    commit, mid-training), restart it, and check the ledger, the offsets and the store."""
    settings = tiny_settings(tmp_path, broker, topic, model_dir)
    sessions = [rewarded(f"k{i}", float(i % 3 == 0), task_id=f"task-{i // 4}") for i in range(16)]
    produce(broker, topic, [*sessions, sessions[5], sessions[11]])  # two redeliveries
    env = learner_env(settings)
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    plans = [("publishing", 1)] + [
        (rng.choice(["checkpoint", "publishing", "published", "batch of", "learner:"]), rng.randint(1, 2))
        for _ in range(2)
    ]
    store = AdapterStore(settings.adapter_store_dir)
    kills = []
    for marker, nth in plans:
        proc = start_learner(env)
        seen, lines = 0, []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith(marker):
                seen += 1
                if seen == nth:
                    os.kill(proc.pid, signal.SIGKILL)
                    kills.append(line.strip())
                    break
        proc.wait(timeout=120)
        proc.stdout.close()
        assert seen == nth or proc.returncode == 0, "".join(lines)  # not killed: it must have ended cleanly
        for version in store.versions():
            store.verify(version)  # a version that is visible is whole
    final = start_learner(env)
    output, _ = final.communicate(timeout=300)
    assert final.returncode == 0, output
    print(f"seed {seed}, killed after: {kills}")

    ledger = Ledger(settings.learner_state_dir / "ledger.jsonl").read()
    consumed = Counter((e["partition"], e["offset"]) for e in ledger)
    assert sorted(consumed.values()) == [1] * 18  # every record accounted for exactly once
    decided = Counter((e["session_id"], e["revision"]) for e in ledger if e["outcome"] != "duplicate")
    assert decided == Counter({(s.session_id, 0): 1 for s in sessions})
    assert sum(e["outcome"] == "duplicate" for e in ledger) == 2
    trained = [e for e in ledger if e["outcome"] == "trained"]
    state = checkpoint.latest(settings.learner_state_dir).state
    assert {e["update"] for e in trained} == set(range(1, state.updates + 1))

    assert sum(state.offsets.values()) == 18
    assert committed_offsets(broker, topic, settings.learner_group) == state.offsets
    versions = store.versions()
    assert versions and not list(store.root.glob(".staging-*"))
    windows = [store.verify(v).manifest for v in versions]
    assert [m.parent for m in windows] == [None, *versions[:-1]]
    for earlier, later in zip(windows, windows[1:], strict=False):
        assert later.data_window["offsets_from"] == earlier.data_window["offsets_to"]
        assert later.data_window["updates"] > earlier.data_window["updates"]


def test_kill_9_around_the_checkpoint_leaves_one_mlflow_run_and_no_duplicated_step(
    broker, mlflow_url, model_dir, tmp_path
):
    """The learner SIGKILLs itself right after the checkpoint (before MLflow) and right after the MLflow
    write (before anything else); restarted each time, the window still has one run, FINISHED, with
    each update's metrics once."""
    topic = f"rewarded-test-{uuid.uuid4().hex[:10]}"
    topics.ensure_topics(broker, [topics.TopicSpec(topic, 1, 3600_000)])
    settings = tiny_settings(tmp_path, broker, topic, model_dir, mlflow_url=mlflow_url)
    produce(broker, topic, [rewarded(f"m{i}", float(i % 2), task_id=f"t{i // 4}") for i in range(8)])
    for crash in ("tracked", "checkpointed", "tracked", None):
        proc = start_learner(learner_env(settings, **({"RATCHET_CRASH_POINT": crash} if crash else {})))
        output, _ = proc.communicate(timeout=300)
        assert proc.returncode == (-signal.SIGKILL if crash else 0), output
        assert (f"crash point {crash}: SIGKILL" in output) if crash else "crash point" not in output, output

    state = checkpoint.latest(settings.learner_state_dir).state
    assert state.updates == 2 and AdapterStore(settings.adapter_store_dir).versions() == ["v1"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(mlflow_url)
    experiment = client.get_experiment_by_name("ratchet-learner")
    runs = client.search_runs([experiment.experiment_id], f"tags.learner_group = '{settings.learner_group}'")
    assert [(r.info.status, r.data.tags.get("adapter_version")) for r in runs] == [("FINISHED", "v1")]
    (run_info,) = runs
    assert "loss" in run_info.data.metrics and "count_trained" in run_info.data.metrics
    for key in run_info.data.metrics:
        steps = [m.step for m in client.get_metric_history(run_info.info.run_id, key)]
        assert len(steps) == len(set(steps)), (key, steps)
    assert [m.step for m in client.get_metric_history(run_info.info.run_id, "loss")] == [1, 2]
