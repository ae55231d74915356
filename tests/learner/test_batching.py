"""Sessions → rows: masks, skips with reasons, the staleness bound, amendments."""

import pytest
import torch

from ingest.contract import SamplingParams, ToolTurn
from learner.advantages import Advantage, AdvantageParams, FamilyStats
from learner.batching import Limits, Trained, admit, collate, plan, rows_of, staleness
from tests.learner.conftest import rewarded

PARAMS = AdvantageParams(min_count=1)


def limits(head=None, known=(), max_staleness=4, max_row_tokens=4096, parents=None) -> Limits:
    return Limits(head, frozenset(known), max_staleness, max_row_tokens, parents=parents)


def test_only_unflagged_assistant_tokens_carry_loss():
    rs = rewarded("s1", 1.0, completion=[5, 6, 7, 8, 9], mask=(1, 3))
    (row,) = rows_of(rs, advantage=0.5)
    assert row.mask == [True, False, False, True, True]
    assert row.advantages == [0.5, 0.0, 0.0, 0.5, 0.5]
    assert row.prompt_ids == [1, 9690, 198, 2683] and row.completion_ids == [5, 6, 7, 8, 9]


def test_each_assistant_turn_is_a_row_with_the_version_that_served_it():
    rs = rewarded("s1", 1.0, version="v2")
    turns = list(rs.session.turns)
    second = turns[1].model_copy(update={"turn_id": "a1", "adapter_version": "v3"})
    tool = ToolTurn(turn_id="t0", name="calc", arguments="{}", output="4")
    rs = rs.model_copy(update={"session": rs.session.model_copy(update={"turns": [*turns, tool, second]})})
    rows = rows_of(rs, 1.0)
    assert [r.version for r in rows] == ["v2", "v3"]
    assert staleness(rs, limits("v5")) == 3  # the turn farthest from the head decides
    assert isinstance(rs.session.turns[2], ToolTurn) and len(rows) == 2  # tool output never becomes a row


# A lineage where the gate rejected v2 and v3 (v3 continued v2), the learner rebased on the champion
# v1 and published v4 and v5 from it; v6 is another line from the base model.
LINEAGE = {"v1": None, "v2": "v1", "v3": "v2", "v4": "v1", "v5": "v4", "v6": None}


@pytest.mark.parametrize(
    ("head", "version", "behind"),
    [
        ("v5", "v5", 0),
        ("v5", "v4", 1),
        ("v5", "v1", 2),  # the champion it rebased on: two versions, though four were published since
        ("v5", None, 3),  # the base model: the head's depth
        ("v5", "v3", 4),  # a rejected line: up to v1, then down to v3
        ("v5", "v6", 4),  # lines that meet only at the base model
        ("v1", "v1", 0),
        ("v1", "v3", 2),
        (None, "v1", 1),
        (None, None, 0),
    ],
)
def test_staleness_counts_versions_along_the_lineage_from_the_head(head, version, behind):
    assert limits(head, parents=LINEAGE).behind(version) == behind


def test_the_champion_traffic_after_a_rejection_streak_is_not_stale():
    """After rejections the learner is back on the champion: its traffic is on-policy, whatever the
    newest published version's number."""
    known = set(LINEAGE)
    champion = [rewarded(f"c{i}", float(i % 2), task_id="t", version="v1") for i in range(4)]
    rejected = [rewarded(f"r{i}", float(i % 2), task_id="u", version="v3") for i in range(2)]
    at_v4 = plan(champion + rejected, {}, set(), {}, limits("v4", known, 1, parents=LINEAGE), PARAMS)
    assert [o.kind for o in at_v4.outcomes] == ["trained"] * 4 + ["stale"] * 2
    assert [o.staleness for o in at_v4.outcomes[:4]] == [1] * 4
    linear = plan(champion, {}, set(), {}, limits("v4", known, 1), PARAMS)  # read as one line v1..v4
    assert [o.kind for o in linear.outcomes] == ["stale"] * 4


def test_a_broken_lineage_ends_the_walk():
    loop = limits("v2", parents={"v1": "v2", "v2": "v1", "v3": "v3"})
    assert loop.behind("v2") == 0 and loop.behind("v1") == 1
    assert loop.behind("v3") == 3 and loop.behind(None) == 2  # never meets the head's line


def test_admission_deduplicates_and_recognises_amendments():
    trained = {"s1": Trained(0, Advantage(1.0, 0.0, 1.0, "group"), ())}
    seen = {("s1", 0), ("s9", 0)}
    batch = [
        rewarded("s1", 0.0, revision=0),  # already trained: duplicate
        rewarded("s1", 0.0, revision=1),  # amendment of a trained session
        rewarded("s2", 0.0, revision=0),  # replaced by revision 2 in the same batch
        rewarded("s2", 1.0, revision=2),
        rewarded("s2", 1.0, revision=2),  # redelivered within the batch
        rewarded("s9", 1.0, revision=0),  # seen (skipped) before
    ]
    kinds = [a.kind for a in admit(batch, trained, seen)]
    assert kinds == ["duplicate", "amendment", "superseded", "fresh", "duplicate", "duplicate"]


def test_skips_are_counted_with_their_reason():
    batch = [
        rewarded("ok", 1.0, task_id="t", version="v3"),
        rewarded("ok2", 0.0, task_id="t", version="v6"),
        rewarded("excl", 1.0, excluded=True),
        rewarded("hack", 1.0, hack_exclude=True),
        rewarded("old", 1.0, version="v1"),
        rewarded("gone", 1.0, version="v9"),
        rewarded("long", 1.0, prompt=list(range(1, 60))),
        rewarded("masked", 1.0, completion=[5, 6], mask=(0, 2), version="v6"),
    ]
    p = plan(
        batch, {}, set(), {}, limits("v6", {"v1", "v3", "v6"}, max_staleness=4, max_row_tokens=50), PARAMS
    )
    kinds = {o.rewarded.session_id: o.kind for o in p.outcomes}
    assert kinds == {
        "ok": "trained",
        "ok2": "trained",
        "excl": "excluded",
        "hack": "hack_excluded",
        "old": "stale",  # v6 − v1 = 5 > 4
        "gone": "unknown_version",
        "long": "too_long",
        "masked": "no_action_tokens",
    }
    assert p.train and len(p.rows) == 2


def test_staleness_bound_is_inclusive_and_counts_the_base_model_as_version_zero():
    batch = [rewarded("a", 1.0, task_id="t", version="v2"), rewarded("b", 0.0, task_id="t")]
    baselines = {"acme/t#reward": FamilyStats(count=5, mean=0.5, var=0.25)}
    at_bound = plan(batch, {}, set(), baselines, limits("v4", {"v2", "v4"}, max_staleness=2), PARAMS)
    assert [o.kind for o in at_bound.outcomes] == ["trained", "stale"]  # v2 is 2 behind; base is 4 behind
    assert [o.staleness for o in at_bound.outcomes] == [2, None]


def test_batches_without_signal_train_nothing():
    equal = [rewarded(f"s{i}", 1.0, task_id=f"t{i}") for i in range(4)]
    p = plan(equal, {}, set(), {}, limits(), PARAMS)
    assert not p.train and p.rows == [] and {o.kind for o in p.outcomes} == {"no_signal"}
    group_of_equals = [rewarded(f"g{i}", 0.5, task_id="same") for i in range(3)]
    p = plan(group_of_equals, {}, set(), {}, limits(), PARAMS, skip_uniform=False)
    assert not p.train  # every advantage is zero
    mixed = plan([*equal[:2], rewarded("s9", 0.0, task_id="t0")], {}, set(), {}, limits(), PARAMS)
    assert mixed.train


def test_amendment_trains_the_difference_once():
    trained_adv = Advantage(value=-1.0, baselines={"reward": 0.5}, scale=0.5, source="group")
    previous = Trained(revision=0, advantage=trained_adv, masked=(("a0", 0, 1),))
    revised = rewarded("s1", 1.0, revision=1, completion=[5, 6, 7, 8], mask=(3, 4))
    p = plan([revised], {"s1": previous}, {("s1", 0)}, {}, limits(), PARAMS)
    (outcome,) = p.outcomes
    assert outcome.kind == "amended" and outcome.advantage.value == pytest.approx(1.0)  # (1 − 0.5) / 0.5
    (row,) = p.rows
    # token 0 was masked before and is kept now: +1; tokens 1, 2 kept in both: 1 − (−1); token 3 masked now: 0 − (−1)
    assert row.advantages == pytest.approx([1.0, 2.0, 2.0, 1.0])
    assert row.mask == [True, True, True, True]
    assert outcome.trained().revision == 1 and outcome.trained().masked == (("a0", 3, 4),)

    redelivered = plan([revised], {"s1": outcome.trained()}, {("s1", 0), ("s1", 1)}, {}, limits(), PARAMS)
    assert [o.kind for o in redelivered.outcomes] == ["duplicate"] and not redelivered.train


def test_an_excluded_amendment_undoes_the_update_and_a_stale_one_is_dropped():
    previous = Trained(revision=0, advantage=Advantage(0.8, {"reward": 0.2}, 0.75, "running"), masked=())
    undo = rewarded("s1", 0.0, revision=1, excluded=True)
    p = plan([undo], {"s1": previous}, set(), {}, limits(), PARAMS)
    assert p.outcomes[0].kind == "amended" and p.rows[0].advantages == pytest.approx([-0.8] * 4)
    assert p.outcomes[0].trained().excluded
    late = rewarded("s1", 0.0, revision=1, version="v1")
    p = plan([late], {"s1": previous}, set(), {}, limits("v9", {"v1", "v9"}, max_staleness=4), PARAMS)
    assert [o.kind for o in p.outcomes] == ["stale"] and not p.train


def test_collate_pads_prompts_left_and_completions_right():
    rows = rows_of(rewarded("a", 1.0, prompt=[1, 2], completion=[3]), 1.0)
    rows += rows_of(rewarded("b", 1.0, prompt=[4, 5, 6], completion=[7, 8], temperature=0.7), -1.0)
    batch = collate(rows, pad_id=0)
    assert batch.prompt_ids_B_P.tolist() == [[0, 1, 2], [4, 5, 6]]
    assert batch.prompt_mask_B_P.tolist() == [[0, 1, 1], [1, 1, 1]]
    assert batch.completion_ids_B_C.tolist() == [[3, 0], [7, 8]]
    assert batch.loss_mask_B_C.tolist() == [[True, False], [True, True]]
    assert batch.advantages_B_C.tolist() == [[1.0, 0.0], [-1.0, -1.0]]
    assert torch.allclose(batch.temperature_B, torch.tensor([1.0, 0.7]))
    assert batch.tokens == 8 and batch.action_tokens == 3


def test_turns_sampled_in_ways_the_trainer_cannot_recompute_carry_no_loss():
    greedy = rewarded("greedy", 1.0, task_id="t", temperature=0.0)
    (row,) = rows_of(greedy, 1.0)
    assert row.mask == [False] * 4 and row.temperature == 1.0
    nucleus = rewarded("nucleus", 0.0, task_id="t", sampling={"temperature": 0.7, "top_p": 0.9})
    penalised = rewarded(
        "penalised", 0.0, task_id="t", sampling={"temperature": 0.7, "presence_penalty": 0.5}
    )
    top_k = rewarded("top_k", 0.0, task_id="t", sampling={"temperature": 0.7, "top_k": 20})
    fine = rewarded("fine", 0.0, task_id="t", temperature=0.7)
    p = plan([greedy, nucleus, penalised, top_k, fine], {}, set(), {}, limits(), PARAMS, skip_uniform=False)
    kinds = {o.rewarded.session_id: o.kind for o in p.outcomes}
    assert kinds == {
        "greedy": "unreproducible_sampling",
        "nucleus": "unreproducible_sampling",
        "penalised": "unreproducible_sampling",
        "top_k": "unreproducible_sampling",
        "fine": "no_signal",  # alone in its group, no baseline yet
    }
    reasons = {o.rewarded.session_id: o.unreproducible() for o in p.outcomes}
    assert reasons["greedy"] == {"a0": "greedy"} and reasons["nucleus"] == {"a0": "top_p"}
    assert reasons["penalised"] == {"a0": "presence_penalty"} and reasons["top_k"] == {"a0": "top_k"}
    assert reasons["fine"] == {}


def test_one_unreproducible_turn_of_a_conversation_is_masked_the_others_train():
    rs = rewarded("two-turns", 1.0)
    first = rs.session.turns[1]
    rs.session.turns.append(
        first.model_copy(update={"turn_id": "a1", "sampling": SamplingParams(temperature=0)})
    )
    rows = rows_of(rs, 1.0)
    assert [any(r.mask) for r in rows] == [True, False]


def test_sessions_recorded_longer_ago_than_the_bound_are_stale():
    from datetime import timedelta

    old = rewarded("old", 1.0, task_id="t")
    new = rewarded("new", 0.0, task_id="t")
    now = new.session.created_at.timestamp()
    old = old.model_copy(
        update={
            "session": old.session.model_copy(
                update={"created_at": new.session.created_at - timedelta(seconds=601)}
            )
        }
    )
    bounded = Limits(None, frozenset(), 4, 4096, max_staleness_s=600.0, now=now)
    p = plan([old, new], {}, set(), {}, bounded, PARAMS, skip_uniform=False)
    assert [o.kind for o in p.outcomes] == ["stale", "no_signal"]


def test_a_group_that_differs_only_in_cost_is_left_out_and_the_rest_trains():
    def scored_session(sid, task, verifiers, cost):
        rs = rewarded(sid, verifiers + cost, task_id=task)
        return rs.model_copy(update={"components": {"verifiers": verifiers, "cost": cost}})

    learnable = [scored_session(f"a{i}", "calc-a", float(i % 2), -0.001 * i) for i in range(4)]
    flat = [scored_session(f"b{i}", "calc-b", 0.0, -0.001 * (i + 1)) for i in range(4)]  # all failed
    p = plan(learnable + flat, {}, set(), {}, limits(), PARAMS)
    kinds = {o.rewarded.session_id: o.kind for o in p.outcomes}
    assert p.train and {kinds[f"a{i}"] for i in range(4)} == {"trained"}
    assert {kinds[f"b{i}"] for i in range(4)} == {"no_signal"}
    assert {r.session_id for r in p.rows} == {f"a{i}" for i in range(4)}
    flat_advantages = [o.advantage.value for o in p.outcomes if o.rewarded.session_id.startswith("b")]
    assert max(abs(a) for a in flat_advantages) < 0.1  # what they would have carried: cost alone
    kept = plan(learnable + flat, {}, set(), {}, limits(), PARAMS, skip_uniform=False)
    assert {r.session_id for r in kept.rows} == {f"a{i}" for i in range(4)} | {f"b{i}" for i in range(4)}


def test_looks_stale_reads_from_the_bytes_what_the_plan_skips_as_stale():
    from datetime import timedelta

    from learner.batching import check, looks_stale

    now = rewarded("x", 0.0).session.created_at.timestamp()
    old_session = rewarded("old", 1.0).session
    records = {
        "base, fresh": rewarded("a", 1.0),
        "v5 at v6": rewarded("b", 1.0, version="v5"),
        "v1 at v6": rewarded("c", 1.0, version="v1"),
        "base at v6": rewarded("d", 1.0),
        "recorded too long ago": rewarded("e", 1.0, version="v6").model_copy(
            update={
                "session": old_session.model_copy(
                    update={"created_at": old_session.created_at - timedelta(hours=2)}
                )
            }
        ),
    }
    known = frozenset(f"v{i}" for i in range(1, 7))
    for head, parents in ((None, None), ("v6", None), ("v6", {"v1": None, "v5": "v1", "v6": "v1"})):
        bound = Limits(head, known, 4, 4096, max_staleness_s=3600.0, now=now, parents=parents)
        for name, rs in records.items():
            assert looks_stale(rs.to_json(), bound) == (check(rs, bound) == "stale"), (head, name)
    bound = Limits("v6", known, 4, 4096, max_staleness_s=3600.0, now=now)
    assert [looks_stale(rs.to_json(), bound) for rs in records.values()] == [True, False, True, True, True]
    assert not looks_stale(b"{not json", bound) and not looks_stale(b'{"session": {}}', bound)
