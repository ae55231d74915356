"""The proxy's open sessions: journal entries, pinned versions, ended ids, and the record they end as."""

from ingest.contract import Session, SessionStatus, parse_obj
from serving.capture import CHAT
from serving.routing import Route
from serving.sessions import EndRequest, OpenSession, SessionStore, request_entry, session_record

SERVED = {
    "prompt_token_ids": [1, 2, 3],
    "completion_token_ids": [7, 8],
    "behaviour_logprobs": [-0.5, -0.25],
    "text": "hi",
}
BODY = {"model": "policy", "messages": [{"role": "user", "content": "hello"}], "temperature": 0.0}


def opened(sid: str = "s-1", version: str | None = "v3", at: float = 1000.0) -> OpenSession:
    route = Route(f"policy-{version}" if version else "base-model", version)
    return OpenSession(sid, "acme", "task-1", "policy", route, at, at, task_family="arith")


def test_a_request_entry_holds_its_turns_tokens_and_seconds():
    entry = request_entry(opened(), CHAT, BODY, SERVED, {"total_tokens": 9}, 0.5, at=1001.0)
    assert [t["role"] for t in entry["turns"]] == ["user", "assistant"]
    assert entry["turns"][1]["adapter_version"] == "v3" and entry["turns"][1]["turn_id"] == "a1"
    assert (entry["tokens"], entry["seconds"], entry["at"]) == (9, 0.5, 1001.0)
    without_usage = request_entry(opened(), CHAT, BODY, SERVED, None, 0.5, at=1001.0)
    assert without_usage["tokens"] == 5  # prompt and completion ids


def test_appended_requests_survive_a_restart_and_pin_their_session(tmp_path):
    store = SessionStore(tmp_path)
    session = opened()
    store.append(session, request_entry(session, CHAT, BODY, SERVED, None, 0.5, at=1001.0), new=True)
    later = {**BODY, "messages": [*BODY["messages"], {"role": "assistant", "content": "hi"}]}
    store.append(session, request_entry(session, CHAT, later, SERVED, None, 0.25, at=1002.0), new=False)
    assert store.pinned() == {"v3": 1} and store.in_memory() == 1

    restarted = SessionStore(tmp_path)  # nothing in memory: read back from the journal
    assert restarted.pinned() == {"v3": 1} and restarted.open_session_ids() == ["s-1"]
    with restarted.lock("s-1"):
        resumed = restarted.load("s-1")
    assert resumed == session and resumed.last_at == 1002.0 and resumed.seconds == 0.75
    assert [t["turn_id"] for t in resumed.turns] == ["u0", "a1", "a2"]


def test_an_ended_session_is_forgotten_and_remembered_as_ended(tmp_path):
    store = SessionStore(tmp_path)
    base = opened("s-base", version=None)
    store.append(base, request_entry(base, CHAT, BODY, SERVED, None, 0.5, at=1001.0), new=True)
    assert store.pinned() == {"base": 1}
    store.forget("s-base")
    assert store.ended("s-base") and store.load("s-base") is None
    assert store.pinned() == {} and store.open_session_ids() == []


def test_the_session_record_carries_its_turns_cost_policy_and_in_line_signals():
    session = opened()
    session.apply(request_entry(session, CHAT, BODY, SERVED, {"total_tokens": 9}, 0.5, at=1001.0))
    end = EndRequest(
        status=SessionStatus.COMPLETED,
        outcome={"tests_passed": 1, "tests_total": 1},
        messages=[{"role": "user", "content": "thanks"}],
    )
    record = session_record(session, end, "acme", ("task-1", "arith"), base_model="base-model")
    assert record["policy"] == {"base_model": "base-model", "adapter_version": "v3"}
    assert [t["turn_id"] for t in record["turns"]] == ["u0", "a1", "u2"]  # the end's messages come last
    assert record["cost"] == {"tokens": 9, "seconds": 0.5}
    assert record["outcome"]["outcome_id"] == "s-1:outcome" and record["outcome"]["tenant"] == "acme"
    assert record["created_at"] == "1970-01-01T00:16:40+00:00"
    assert parse_obj(Session, record).session_id == "s-1"  # meets the contract
