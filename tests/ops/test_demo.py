"""The demo's wait for the run's last candidate (pure: no stack)."""

from ops.demo import settled


def test_the_demo_waits_for_the_learners_last_updates_and_the_gates_decision():
    assert not settled("v3", {"v1", "v2"}, trained=12, published=12)  # v3 not decided yet
    assert not settled("v3", {"v1", "v2", "v3"}, trained=14, published=12)  # 2 updates not published
    assert settled("v3", {"v1", "v2", "v3"}, trained=12, published=12)
    assert not settled(None, set(), trained=3, published=0)  # the first version is still to come
    assert settled(None, set(), trained=0, published=0)  # nothing trained: nothing to wait for
    assert settled("v2", {"v1", "v2"}, trained=None, published=9)  # no /health: the gate alone
    assert not settled("v2", {"v1"}, trained=None, published=9)
