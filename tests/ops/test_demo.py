"""The demo's wait for the run's last candidate (pure: no stack)."""

from ops.demo import settled


def test_the_demo_waits_for_the_learners_last_updates_and_the_gates_decision():
    assert not settled("v3", {"v1", "v2"}, unpublished=0)  # v3 not decided yet
    assert not settled("v3", {"v1", "v2", "v3"}, unpublished=2)  # 2 updates not published
    assert settled("v3", {"v1", "v2", "v3"}, unpublished=0)
    assert not settled(None, set(), unpublished=3)  # the first version is still to come
    assert settled(None, set(), unpublished=0)  # nothing trained: nothing to wait for
    assert settled("v2", {"v1", "v2"}, unpublished=None)  # no /health: the gate alone
    assert not settled("v2", {"v1"}, unpublished=None)
