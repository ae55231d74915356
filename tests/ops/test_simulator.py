"""The traffic simulator against the real capture proxy, ingest API, vLLM and broker: a session is a
tool call, its output and a final answer, or (``sim_followup_max_tokens = 0``, as the learning
benchmark runs it) the tool call and its output alone; its late outcome names it."""

from __future__ import annotations

import asyncio

import pytest

from gating.verifiers import parse_tool_call
from ingest import topics
from ingest.contract import Outcome, Session, parse
from ingest.settings import IngestSettings
from ops.simulator import SessionResult, Simulator, SimulatorSettings
from serving.proxy import create_app
from tests.ingest.conftest import read_topic
from tests.ingest.conftest import serving as serving_ingest
from tests.serving.conftest import TOKENS, proxy_settings, serving  # noqa: F401  (a fixture)


@pytest.fixture
def endpoints(proxy_settings, broker):  # noqa: F811
    ingest = IngestSettings(kafka_bootstrap=broker, ingest_tokens=TOKENS, ingest_delivery_timeout_s=10)
    with serving(create_app(proxy_settings)) as proxy_url, serving_ingest(ingest) as ingest_api:
        yield proxy_url, str(ingest_api.base_url).rstrip("/")


SESSIONS = 12  # one task's group; enough that the base model calls the tool in at least one


def simulate(proxy_url: str, ingest_url: str, followup_tokens: int) -> list:
    settings = SimulatorSettings(
        proxy_url=proxy_url,
        ingest_url=ingest_url,
        sim_tenant="acme",
        sim_token=TOKENS["acme"],
        sim_concurrency=4,
        sim_group_size=SESSIONS,
        sim_mix={"calculator": "1"},
        sim_max_tokens=24,
        sim_followup_max_tokens=followup_tokens,
        sim_outcome_delay_s=0.0,
        sim_feedback_rate=0.0,
    )
    sim = Simulator(settings, progress=lambda _: None)
    results = asyncio.run(sim.run(max_sessions=SESSIONS))
    assert not sim.errors, sim.errors
    return results


@pytest.mark.parametrize("followup_tokens", [0, 6])
def test_a_simulated_session_has_one_turn_per_model_call_and_its_outcome(endpoints, broker, followup_tokens):
    proxy_url, ingest_url = endpoints
    results = simulate(proxy_url, ingest_url, followup_tokens)
    ids = {r.session_id.encode(): r for r in results}
    assert len(ids) == SESSIONS and len({r.task_id for r in results}) == 1  # one task's group
    found = read_topic(broker, topics.SESSIONS, keep=lambda k, v: k in ids, done=lambda f: len(f) >= SESSIONS)
    calls = 0
    for key, value in found:
        session = parse(Session, value)
        roles = [t.role for t in session.turns]
        assert session.task_family == "calculator" and session.task_id == ids[key].task_id
        assert roles[:2] == ["user", "assistant"]
        called = parse_tool_call(session.turns[1].text)[0] is not None
        calls += called
        if called and followup_tokens:  # the tool's output, then the final answer
            assert roles == ["user", "assistant", "tool", "user", "assistant"], roles
            assert len(session.turns[-1].completion_token_ids) <= followup_tokens
        elif called:  # the tool ran, recorded with the end: no second model turn
            assert roles == ["user", "assistant", "tool"], roles
        else:
            assert roles == ["user", "assistant"], roles
    assert calls > 0  # the model made a tool call at least once: both ways were exercised
    outcomes = read_topic(
        broker, topics.OUTCOMES, keep=lambda k, v: k in ids, done=lambda f: len(f) >= SESSIONS
    )
    for key, value in outcomes:
        assert parse(Outcome, value).verifiers_passed == int(ids[key].passed)


def test_the_progress_line_gives_recent_success_by_family_and_shortcuts():
    sim = Simulator(SimulatorSettings(), progress=lambda _: None)

    def result(i: int, family: str, passed: bool, shortcut: bool = False) -> SessionResult:
        return SessionResult(f"s{i}", f"{family}-{i}", family, passed, shortcut, "v2" if i % 2 else None, 0.0)

    sim.results = [result(i, "calculator", False) for i in range(50)]  # older than the window
    sim.results += [result(50 + i, "calculator", i < 3) for i in range(4)]
    sim.results += [result(60 + i, "lure", False, shortcut=i < 2) for i in range(4)]
    line = sim.summary(window=8)
    assert line.startswith("simulator: 58 sessions; last 8: success calculator 0.75, lure 0.00, 2 shortcuts;")
    assert "recent versions {'base': 10, 'v2': 10}" in line
    assert "shortcuts" not in Simulator(SimulatorSettings(), progress=print).summary()
