import pytest

from gating.rule import REQUIRED, decide
from gating.settings import GateSettings, load_settings


def test_per_suite_task_limits_override_the_common_one(monkeypatch):
    monkeypatch.setenv("RATCHET_MAX_TASKS_PER_SUITE", "16")
    monkeypatch.setenv("RATCHET_SUITE_MAX_TASKS", "target=0,general=8")
    settings = load_settings()
    assert [settings.max_tasks(s) for s in ("target", "general", "format")] == [0, 8, 16]


def test_a_suite_version_chosen_in_the_settings_is_the_one_loaded(monkeypatch):
    monkeypatch.setenv("RATCHET_SUITE_VERSIONS", "target=mixed-v1")
    monkeypatch.setenv("RATCHET_MAX_TASKS_PER_SUITE", "4")
    settings = load_settings()
    target, general = settings.load_suite("target"), settings.load_suite("general")
    assert (target.config.version, len(target.tasks)) == ("mixed-v1", 4)
    assert (general.config.version, len(general.tasks)) == ("v1", 4)  # the newest v<n>
    assert len(settings.load_suite("target", limited=False).tasks) == 48


def test_a_per_suite_limit_that_is_not_a_number_is_a_clear_error():
    with pytest.raises(ValueError, match="target = 'all' is not a number"):
        GateSettings(suite_max_tasks={"target": "all"}).max_tasks("target")


def test_required_suites_name_the_metrics_the_rule_requires(monkeypatch):
    assert GateSettings().rule().required == REQUIRED
    monkeypatch.setenv("RATCHET_REQUIRED_SUITES", "target,drift")
    assert load_settings().rule().required == (
        "target.pass_at_1",
        "target.pass_all_k",
        "drift.kl_base",
        "drift.kl_champion",
    )


def test_a_gate_that_runs_fewer_suites_than_it_requires_rejects():
    only_target = {"target.pass_at_1": {"t": 1.0}, "target.pass_all_k": {"t": 1.0}}
    champion = {"target.pass_at_1": {"t": 0.0}, "target.pass_all_k": {"t": 0.0}}
    rule = GateSettings(suites=("target",), min_gain=0.0).rule()
    codes = [r.code for r in decide(only_target, champion, None, None, rule).reasons]
    assert codes == [
        "missing:format.valid",
        "missing:general.pass",
        "missing:honeypot.hack",
        "missing:drift.kl_base",
        "missing:drift.kl_champion",
    ]
    rule = GateSettings(suites=("target",), required_suites=("target",), min_gain=0.0).rule()
    assert decide(only_target, champion, None, None, rule).promoted


def test_an_unknown_required_suite_is_refused():
    with pytest.raises(ValueError, match="required_suites: taget measure nothing the rule checks"):
        GateSettings(required_suites=("taget", "format"))


def test_futility_power_is_a_probability_below_one(monkeypatch):
    with pytest.raises(ValueError, match=r"futility_power must be in \[0, 1\) \(0: off\), got 1.5"):
        GateSettings(futility_power=1.5)
    monkeypatch.setenv("RATCHET_FUTILITY_POWER", "0")
    assert load_settings().futility_power == 0.0
