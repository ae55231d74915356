"""Which part of each prompt the trainer runs once for several rows (pure: no model)."""

from learner.trainer import shared_prefixes

SYSTEM = list(range(100, 160))  # a system prompt every task shares
TASK = SYSTEM + list(range(500, 540))  # one task's first-turn prompt (minus its last token)


def conversations() -> list[list[int]]:
    """A task's group of four two-turn sessions: four identical first turns, and second turns that
    carry the first turn's prompt, its answer (pairs of which start alike) and a tool's output."""
    answers = [[7, 8, 9, 1], [7, 8, 9, 2], [7, 8, 3, 4], [7, 8, 3, 5]]
    first = [TASK[:] for _ in answers]
    second = [TASK + [99] + answer + [42, 43] for answer in answers]
    return first + second


def test_later_turns_share_the_first_turns_prompt_not_each_pairs_longer_start():
    heads = conversations()  # folding the pairs' heads (104) costs 2 x 4 positions each
    shared, split = shared_prefixes(heads, None)
    assert shared == [(None, tuple(TASK))]
    assert split == [len(TASK)] * len(heads)
    computed = len(TASK) + sum(len(h) - s for h, s in zip(heads, split, strict=True))
    assert computed < sum(len(h) for h in heads) / 4


def test_a_pair_sharing_a_long_answer_keeps_its_own_head_when_that_is_cheaper():
    long_answer = list(range(1000, 1080))
    heads = [TASK[:]] + [TASK + long_answer + [i] for i in range(4)]
    shared, split = shared_prefixes(heads, None)
    # folding the four into the task's head would run 4 x 80 positions to save 180
    assert split == [len(TASK)] + [len(TASK) + 80] * 4
    assert {len(ids) for _, ids in shared} == {len(TASK), len(TASK) + 80}


def test_rows_of_different_adapters_never_share_and_unique_rows_share_what_they_can():
    heads = [TASK[:], TASK[:], [1, 2, 3], SYSTEM + [7, 7]]
    shared, split = shared_prefixes(heads, ["v1", "v2", "v1", "v1"])
    assert split[2] == 0  # nothing in common with any row: runs whole
    assert split[3] == len(SYSTEM) and split[0] == len(SYSTEM)  # v1's rows share the system prompt
    assert split[1] == 0  # the only v2 row
    assert ("v1", tuple(SYSTEM)) in shared and ("v2", ()) in shared
