import pytest

from gating.settings import GateSettings, load_settings


def test_per_suite_task_limits_override_the_common_one(monkeypatch):
    monkeypatch.setenv("RATCHET_MAX_TASKS_PER_SUITE", "16")
    monkeypatch.setenv("RATCHET_SUITE_MAX_TASKS", "target=0,general=8")
    settings = load_settings()
    assert [settings.max_tasks(s) for s in ("target", "general", "format")] == [0, 8, 16]


def test_a_per_suite_limit_that_is_not_a_number_is_a_clear_error():
    with pytest.raises(ValueError, match="target = 'all' is not a number"):
        GateSettings(suite_max_tasks={"target": "all"}).max_tasks("target")
