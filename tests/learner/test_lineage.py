"""The learner follows the ratchet: the rebase rule, and a real learner rebasing (kill -9 included)."""

from __future__ import annotations

import signal
import uuid
from collections.abc import Callable

import torch
from safetensors.torch import load_file

from ingest import topics
from learner import checkpoint
from learner.checkpoint import Ledger
from learner.lineage import BASE, Course, GateView, course, read_gate
from learner.loop import Learner
from learner.store import AdapterStore
from tests.learner.conftest import produce, rewarded, tiny_settings
from tests.learner.test_loop import learner_env, start_learner

PARENTS = {"v1": None, "v2": "v1", "v3": "v2", "v4": "v3", "v5": "v4"}


def rebase_target(
    head: str, parent_of: Callable[[str], str | None], view: GateView, keep_short: int = 0
) -> str | None:
    return course(head, parent_of, view, keep_short).target


def target(head: str, champion: str | None, decided: set[str]) -> str | None:
    return rebase_target(head, PARENTS.get, GateView(champion, frozenset(decided)))


def test_a_line_through_undecided_candidates_goes_on():
    assert target("v3", None, set()) is None  # nothing decided: every line meets the base model
    assert target("v3", "v1", {"v1"}) is None  # v2, v3 in flight above the champion
    assert target("v5", "v3", {"v1", "v3"}) is None  # v1 decided below the champion: not on the way
    assert target(BASE, None, set()) is None


def test_a_decision_on_the_way_to_the_champion_rebases_on_it():
    assert target("v2", None, {"v1"}) == BASE  # v1 rejected while v2 trained on top of it
    assert target("v4", "v1", {"v1", "v3"}) == "v1"  # v3 rejected: back to v1
    assert target("v3", "v1", {"v1", "v2", "v3"}) == "v1"  # the head itself rejected
    # v3 was promoted, then rolled back to v1: v3 is decided and no longer champion
    assert target("v4", "v1", {"v1", "v3"}) == "v1"


def test_rejections_that_fell_short_stay_on_the_line_up_to_the_limit():
    def view(champion: str | None, decided: set[str], short: set[str]) -> GateView:
        promoted = {champion} if champion else set()
        return GateView(champion, frozenset(decided), frozenset(promoted), frozenset(short))

    v2_short = view("v1", {"v1", "v2"}, {"v2"})
    assert rebase_target("v3", PARENTS.get, v2_short, keep_short=1) is None
    assert rebase_target("v2", PARENTS.get, v2_short, keep_short=1) is None  # the head itself
    assert rebase_target("v3", PARENTS.get, v2_short, keep_short=0) == "v1"  # 0: every rejection
    both = view("v1", {"v1", "v2", "v3"}, {"v2", "v3"})
    assert rebase_target("v4", PARENTS.get, both, keep_short=2) is None
    assert rebase_target("v4", PARENTS.get, both, keep_short=1) == "v1"  # the second one in a row
    # what the learner says it keeps, nearest first; and where it left when it does not
    assert course("v4", PARENTS.get, both, keep_short=2) == Course(None, None, ("v3", "v2"))
    assert course("v4", PARENTS.get, both, keep_short=1) == Course("v2", "v1")
    # a short rejection above one that regressed: the line left at the regression
    assert rebase_target("v4", PARENTS.get, view("v1", {"v1", "v2", "v3"}, {"v3"}), keep_short=5) == "v1"
    # short rejections below the champion are not on the way and count for nothing
    assert (
        rebase_target("v5", PARENTS.get, view("v3", {"v1", "v2", "v3", "v4"}, {"v1", "v2", "v4"}), 1) is None
    )
    # the first candidate against the base model
    assert rebase_target("v2", PARENTS.get, view(None, {"v1"}, {"v1"}), keep_short=1) is None
    assert not course("v3", PARENTS.get, v2_short, keep_short=0).awaits_confirmation  # a rejection: at once


def test_a_champion_off_the_line_is_joined():
    parents = {"v1": None, "v2": None, "v3": "v1"}  # v2 came from another line (or learner)
    assert rebase_target("v3", parents.get, GateView("v2", frozenset({"v2"}))) == "v2"
    assert rebase_target(BASE, parents.get, GateView("v2", frozenset({"v2"}))) == "v2"
    loop = {"v1": "v2", "v2": "v1"}  # a corrupt ancestry ends the walk instead of looping
    assert rebase_target("v1", loop.get, GateView("v7", frozenset())) == "v7"


def test_a_promotion_half_written_awaits_confirmation_a_rejection_does_not():
    """The gate tags a promoted version before it moves the alias: a reader in between sees the
    version promoted below the champion's alias on the head's line, as after a rollback."""

    def view(champion: str | None, decided: set[str], promoted: set[str]) -> GateView:
        return GateView(champion, frozenset(decided), frozenset(promoted))

    half_written = view("v1", {"v1", "v3"}, {"v1", "v3"})  # v3 promoted, the alias still on v1
    assert rebase_target("v4", PARENTS.get, half_written) == "v1"
    assert course("v4", PARENTS.get, half_written).awaits_confirmation
    assert course("v3", PARENTS.get, half_written).awaits_confirmation  # the head itself promoted
    assert course("v2", PARENTS.get, view(None, {"v1"}, {"v1"})).awaits_confirmation  # the first promotion
    assert not course("v4", PARENTS.get, view("v1", {"v1", "v3"}, {"v1"})).awaits_confirmation  # v3 rejected
    assert not course("v4", PARENTS.get, view("v3", {"v3"}, {"v3"})).awaits_confirmation  # the line goes on
    off_line = {"v1": None, "v2": None, "v3": "v1"}  # champion v2 of another line, v1 promoted earlier
    assert not course("v3", off_line.get, view("v2", {"v1", "v2"}, {"v1", "v2"})).awaits_confirmation
    assert rebase_target("v3", off_line.get, view("v2", {"v1", "v2"}, {"v1", "v2"})) == "v2"


def adapter_weights(folder) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "adapter_model.safetensors"))


def policy_weights(learner: Learner) -> dict[str, torch.Tensor]:
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(learner.trainer.model, adapter_name="default")


def test_a_rebase_loads_the_champions_weights_and_optimizer_state(
    broker, topic, model_dir, tmp_path, single_thread
):
    """v1 published, v2 trained on top; the gate keeps v1 and rejects v2 (short of the required gain
    first: the line goes on; then outright): the learner's weights and AdamW state become exactly
    v1's, and its next version names v1 as parent."""
    settings = tiny_settings(
        tmp_path, broker, topic, model_dir, publish_every_updates=1, keep_short_rejections=1
    )
    produce(broker, topic, [rewarded(f"a{i}", float(i % 2), task_id="t0") for i in range(8)])
    learner = Learner(settings, print)
    try:
        for _ in range(2):
            learner.step(learner.consumer.batch(4, 1 << 20, 10.0, 10.0, lambda _: 1))
        store = AdapterStore(settings.adapter_store_dir)
        assert store.versions() == ["v1", "v2"] and learner.state.head == "v2"
        v1 = store.verify("v1")
        saved = torch.load(learner.optimizer_snapshot(v1.manifest.data_window["checkpoint"]))

        learner.follow_view(GateView("v1", frozenset({"v1"})))  # v1 champion, v2 undecided: go on
        assert learner.state.head == "v2" and learner.state.rebases == 0
        learner.follow_view(GateView("v1", frozenset({"v1", "v2"}), frozenset({"v1", "v2"})))
        assert learner.state.head == "v2" and learner.state.rebases == 0  # v2 promoted, alias not moved yet
        short = GateView("v1", frozenset({"v1", "v2"}), frozenset({"v1"}), frozenset({"v2"}))
        learner.follow_view(short)  # v2 rejected short of the required gain: kept
        assert learner.state.head == "v2" and learner.state.rebases == 0
        rejected = GateView("v1", frozenset({"v1", "v2"}), frozenset({"v1"}))  # v2 rejected: at once
        learner.follow_view(rejected)
        assert learner.state.head == "v1" and learner.state.rebases == 1
        now, wanted = policy_weights(learner), adapter_weights(v1.path)
        assert set(now) == set(wanted)
        for name, tensor in wanted.items():
            assert torch.equal(now[name], tensor), name
        state = learner.trainer.optimizer.state_dict()["state"]
        assert state.keys() == saved["state"].keys()
        for key, moments in saved["state"].items():
            assert torch.equal(state[key]["exp_avg"], moments["exp_avg"])
            assert torch.equal(state[key]["step"], moments["step"])

        produce(broker, topic, [rewarded(f"b{i}", float(i % 2), task_id="t1") for i in range(4)])
        learner.step(learner.consumer.batch(4, 1 << 20, 10.0, 10.0, lambda _: 1))
        assert store.versions() == ["v1", "v2", "v3"]
        v3 = store.verify("v3").manifest
        assert v3.parent == "v1" and learner.state.head == "v3"
        assert v3.data_window["offsets_from"] == store.verify("v2").manifest.data_window["offsets_to"]
        assert checkpoint.latest(settings.learner_state_dir).state.rebases == 1

        rolled_back = GateView(None, frozenset({"v1", "v2", "v3"}), frozenset({"v1", "v3"}))  # v3 to base
        learner.follow_view(rolled_back)
        assert learner.state.head == "v3"  # as a promotion half-written looks: confirmed on the next read
        learner.follow_view(rolled_back)
        assert learner.state.head == BASE
        assert all(not t.any() for n, t in policy_weights(learner).items() if "lora_B" in n)
    finally:
        learner.close()


def test_after_a_rejection_streak_the_champions_traffic_trains(
    broker, topic, model_dir, tmp_path, single_thread
):
    """v1 promoted, v2 and v3 rejected: the learner is back on v1, so v1's traffic is on-policy and
    trains although three versions are published (staleness counts versions from the head, not
    version numbers); traffic the rejected v3 served is two versions off the head, over the bound."""
    settings = tiny_settings(tmp_path, broker, topic, model_dir, publish_every_updates=1, max_staleness=1)
    produce(broker, topic, [rewarded(f"a{i}", float(i % 2), task_id="t0") for i in range(4)])
    learner = Learner(settings, print)
    try:
        learner.step(learner.consumer.batch(4, 1 << 20, 10.0, 10.0, lambda _: 1))  # -> v1
        produce(
            broker, topic, [rewarded(f"b{i}", float(i % 2), task_id="t1", version="v1") for i in range(4)]
        )
        learner.step(learner.consumer.batch(4, 1 << 20, 10.0, 10.0, lambda _: 1))  # -> v2
        produce(
            broker, topic, [rewarded(f"c{i}", float(i % 2), task_id="t2", version="v2") for i in range(4)]
        )
        learner.step(learner.consumer.batch(4, 1 << 20, 10.0, 10.0, lambda _: 1))  # -> v3
        store = AdapterStore(settings.adapter_store_dir)
        assert store.versions() == ["v1", "v2", "v3"] and learner.state.head == "v3"

        learner.follow_view(GateView("v1", frozenset({"v1", "v2", "v3"})))
        assert learner.state.head == "v1"
        champion = [rewarded(f"d{i}", float(i % 2), task_id="t3", version="v1") for i in range(4)]
        rejected = [rewarded(f"e{i}", float(i % 2), task_id="t4", version="v3") for i in range(2)]
        base = [rewarded(f"f{i}", float(i % 2), task_id="t5") for i in range(2)]
        produce(broker, topic, champion + rejected + base)
        learner.step(learner.consumer.batch(8, 1 << 20, 10.0, 10.0, lambda _: 1))
        ledger = {e["session_id"]: e for e in Ledger(settings.learner_state_dir / "ledger.jsonl").read()}
        assert {ledger[f"d{i}"]["outcome"] for i in range(4)} == {"trained"}
        assert {ledger[f"d{i}"]["staleness"] for i in range(4)} == {0}
        assert {ledger[f"e{i}"]["outcome"] for i in range(2)} == {"stale"}
        assert {ledger[f"f{i}"]["outcome"] for i in range(2)} == {"trained"}  # base: one version below v1
        assert ledger["d0"]["served"] == ["v1"] and ledger["f0"]["served"] == ["base"]
        v4 = store.verify("v4").manifest
        assert v4.parent == "v1" and learner.state.head == "v4"
    finally:
        learner.close()


def test_the_learner_reads_a_rejection_from_mlflow_and_a_kill_mid_rebase_converges(
    broker, mlflow_url, model_dir, tmp_path
):
    """The gate's decisions as MLflow holds them (registry version tags and the champion alias, written
    by the gate's own Registry) make the learner rebase; SIGKILL right after the rebase (before its
    checkpoint), restart: every session is trained once and the new version continues the champion."""
    from gating.decisions import Entry, State
    from gating.records import Registry

    topic = f"rewarded-test-{uuid.uuid4().hex[:10]}"
    topics.ensure_topics(broker, [topics.TopicSpec(topic, 1, 3600_000)])
    model = f"lineage-{uuid.uuid4().hex[:8]}"
    settings = tiny_settings(
        tmp_path,
        broker,
        topic,
        model_dir,
        mlflow_url=mlflow_url,
        registered_model=model,
        follow_every_s=0.0,
        publish_every_updates=1,
    )
    env = learner_env(settings)
    produce(broker, topic, [rewarded(f"p{i}", float(i % 2), task_id="t0") for i in range(4)])
    proc = start_learner(env)
    output, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, output
    store = AdapterStore(settings.adapter_store_dir)
    assert store.versions() == ["v1"]

    registry = Registry(mlflow_url, model, f"{model}-gate")
    v1 = store.verify("v1")
    run_id = registry.log_run(f"d-{model}", "v1 vs base", {}, {}, {"gate.decision": "reject"}, {})
    entry = Entry(f"d-{model}", "v1", "evaluate", "reject", "gate", [], None, State(None, "v1"),
                  content_hash=v1.manifest.content_hash, run_id=run_id)  # fmt: skip
    registry.reconcile(entry.state, [entry])  # v1 rejected: a challenger, the base model stays champion

    produce(broker, topic, [rewarded(f"q{i}", float(i % 2), task_id="t1") for i in range(4)])
    crashed = start_learner(learner_env(settings, RATCHET_CRASH_POINT="rebased"))
    output, _ = crashed.communicate(timeout=300)
    assert crashed.returncode == -signal.SIGKILL and "rebased on base (the gate left v1's line)" in output, (
        output
    )
    assert store.versions() == ["v1"]

    final = start_learner(env)
    output, _ = final.communicate(timeout=300)
    assert final.returncode == 0 and "rebased on base" in output, output
    assert store.versions() == ["v1", "v2"]
    assert store.verify("v2").manifest.parent is None  # continues the base model, not the rejected v1
    state = checkpoint.latest(settings.learner_state_dir).state
    assert state.head == BASE and state.rebases == 1  # checkpointed before the publish (a restart reads v2's)
    ledger = Ledger(settings.learner_state_dir / "ledger.jsonl").read()
    assert sorted(e["session_id"] for e in ledger) == sorted(
        [*(f"p{i}" for i in range(4)), *(f"q{i}" for i in range(4))]
    )
    assert all(e["outcome"] == "trained" for e in ledger)


def test_the_gate_view_read_from_mlflow_names_the_rejections_that_fell_short(mlflow_url):
    """Version tags as the gate's Registry writes them from its log: a rejection for its target gain
    alone with a positive gain fell short; a negative gain, another failed check or an operator's
    rejection did not."""
    from gating.decisions import Entry, State
    from gating.records import Registry

    model = f"short-{uuid.uuid4().hex[:8]}"
    registry = Registry(mlflow_url, model, f"{model}-gate")
    gain = [{"code": "target_gain", "message": "short"}]
    hack = [{"code": "hack_rate", "message": "shortcuts"}]
    cases = [  # version, action, decision, reasons, gain, state after
        ("v1", "evaluate", "promote", [], 0.3, State("v1")),
        ("v2", "evaluate", "reject", gain, 0.08, State("v1", "v2")),
        ("v3", "evaluate", "reject", gain, -0.03, State("v1", "v3")),
        ("v4", "evaluate", "reject", gain + hack, 0.1, State("v1", "v4")),
        ("v5", "reject", "reject", gain, 0.1, State("v1", "v5")),
    ]
    entries = []
    for version, action, decision, reasons, value, state in cases:
        run_id = registry.log_run(f"d-{model}-{version}", version, {}, {}, {"gate.decision": decision}, {})
        entries.append(
            Entry(f"d-{model}-{version}", version, action, decision, "gate", reasons, "v1", state,
                  content_hash=f"hash-{version}", run_id=run_id, metrics={"target.gain": value})
        )  # fmt: skip
        registry.reconcile(state, entries)  # as the gate does after each decision
    view = read_gate(mlflow_url, model)
    assert view.champion == "v1" and view.promoted == {"v1"}
    assert view.decided == {"v1", "v2", "v3", "v4", "v5"} and view.short == {"v2"}
