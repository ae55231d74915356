"""A small Python client for product teams: sessions through the capture proxy, late signals
through the ingest API, all with the tenant's token.

    from ingest.client import Ratchet

    ratchet = Ratchet(tenant="acme", token="s3cret")          # the local stack's defaults
    session = ratchet.session(task_id="calc-17", task_family="calc")
    reply = session.openai.chat.completions.create(model="policy", messages=[...])
    session.end(outcome={"tests_passed": 3, "tests_total": 4})   # or end() and report later:
    ratchet.outcome(session.id, tests_passed=4, tests_total=4)   # a late test result
    ratchet.feedback(session.id, "accept")                       # the user's verdict

``session.openai`` is an ``openai.OpenAI`` client whose requests carry the session's headers, so an
agent framework that takes an OpenAI client needs no other change. Records are sent with ids made
once per call, so the client's own retries (on 503 with ``Retry-After``, when the broker did not
acknowledge) never double-count: the stages de-duplicate by id.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from ingest.contract import FeedbackKind

SESSION_HEADER = "X-Ratchet-Session"
TASK_HEADER = "X-Ratchet-Task"
TASK_FAMILY_HEADER = "X-Ratchet-Task-Family"


class RatchetError(RuntimeError):
    """A request Ratchet refused or could not take; ``status`` and ``reason`` say which and why."""

    def __init__(self, status: int, reason: str):
        super().__init__(f"{status}: {reason}")
        self.status = status
        self.reason = reason


def _reason(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if "detail" in body:
            return str(body["detail"])
    return str(body)[:500]


@dataclass
class Ratchet:
    tenant: str
    token: str
    proxy_url: str = "http://127.0.0.1:18200"
    ingest_url: str = "http://127.0.0.1:18100"
    timeout_s: float = 120.0
    retries: int = 3  # attempts after a 503 (broker did not acknowledge), waiting its Retry-After
    _http: httpx.Client = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._http = httpx.Client(timeout=self.timeout_s, headers={"Authorization": f"Bearer {self.token}"})

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Ratchet:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def session(
        self, session_id: str | None = None, task_id: str | None = None, task_family: str | None = None
    ) -> AgentSession:
        """A new session (a fresh id unless given); its ``openai`` client records every request."""
        return AgentSession(self, session_id or f"{self.tenant}-{uuid.uuid4().hex}", task_id, task_family)

    def outcome(
        self,
        session_id: str,
        *,
        tests_passed: int | None = None,
        tests_total: int | None = None,
        verifiers_passed: int | None = None,
        verifiers_total: int | None = None,
        details: str | None = None,
        outcome_id: str | None = None,
    ) -> dict:
        """Post a late outcome (tests or verifiers) of a session to the ingest API."""
        record = {
            "outcome_id": outcome_id or f"{session_id}:outcome:{uuid.uuid4().hex[:12]}",
            "session_id": session_id,
            "tenant": self.tenant,
            "tests_passed": tests_passed,
            "tests_total": tests_total,
            "verifiers_passed": verifiers_passed,
            "verifiers_total": verifiers_total,
            "details": details,
        }
        return self._post(
            f"{self.ingest_url}/v1/outcomes", {k: v for k, v in record.items() if v is not None}
        )

    def feedback(
        self,
        session_id: str,
        kind: str,
        *,
        edited_text: str | None = None,
        comment: str | None = None,
        feedback_id: str | None = None,
    ) -> dict:
        """Post the user's verdict on a session (``accept``, ``reject``, ``edit``...) to the ingest API."""
        kinds = [k.value for k in FeedbackKind]
        if kind not in kinds:
            raise ValueError(f"feedback kind {kind!r} is not one of {', '.join(kinds)}")
        record = {
            "feedback_id": feedback_id or f"{session_id}:feedback:{uuid.uuid4().hex[:12]}",
            "session_id": session_id,
            "tenant": self.tenant,
            "kind": kind,
            "edited_text": edited_text,
            "comment": comment,
        }
        return self._post(
            f"{self.ingest_url}/v1/feedback", {k: v for k, v in record.items() if v is not None}
        )

    def _post(self, url: str, body: dict) -> dict:
        for attempt in range(self.retries + 1):
            resp = self._http.post(url, json=body)
            if resp.status_code == 503 and attempt < self.retries:
                time.sleep(float(resp.headers.get("Retry-After", "1")))  # the server's own back-off
                continue
            if resp.status_code >= 400:
                raise RatchetError(resp.status_code, _reason(resp))
            return resp.json()
        raise AssertionError("unreachable")


@dataclass
class AgentSession:
    ratchet: Ratchet
    id: str
    task_id: str | None = None
    task_family: str | None = None
    _openai: Any = field(default=None, init=False, repr=False)

    @property
    def headers(self) -> dict[str, str]:
        out = {SESSION_HEADER: self.id}
        if self.task_id:
            out[TASK_HEADER] = self.task_id
        if self.task_family:
            out[TASK_FAMILY_HEADER] = self.task_family
        return out

    @property
    def openai(self):
        """An ``openai.OpenAI`` client on the capture proxy, sending this session's headers."""
        if self._openai is None:
            from openai import OpenAI

            self._openai = OpenAI(
                base_url=f"{self.ratchet.proxy_url}/v1",
                api_key=self.ratchet.token,
                default_headers=self.headers,
                timeout=self.ratchet.timeout_s,
                max_retries=0,  # a retried completion would be a second turn of the session
            )
        return self._openai

    def end(
        self,
        status: str = "completed",
        outcome: dict | None = None,
        feedback: dict | None = None,
        messages: list[dict] | None = None,
    ) -> dict:
        """End the session: the proxy produces its record (with an in-line outcome or feedback, and
        ``messages``: what the agent did after the model's last turn, e.g. the tool calls it ran and
        their output); returns where it was written (partition, offset)."""
        body: dict[str, Any] = {"status": status}
        if outcome is not None:
            body["outcome"] = outcome
        if feedback is not None:
            body["feedback"] = feedback
        if messages:
            body["messages"] = messages
        return self.ratchet._post(f"{self.ratchet.proxy_url}/v1/sessions/{self.id}/end", body)
