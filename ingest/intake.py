"""Judging the records of one ingest request: parse, de-duplicate, check the tenant. No I/O."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from ingest import topics
from ingest.contract import MAX_ID_CHARS, ContractError, Feedback, Outcome, Record, Session, parse


@dataclass(frozen=True)
class Endpoint:
    """One ingest endpoint: the record it takes, its topic and the id unique within a batch."""

    name: str
    model: type[Record]
    topic: str
    id_field: str

    @property
    def path(self) -> str:
        return f"/v1/{self.name}"

    @property
    def source(self) -> str:
        return f"ingest.api:{self.path}"


ENDPOINTS = (
    Endpoint("sessions", Session, topics.SESSIONS, "session_id"),
    Endpoint("feedback", Feedback, topics.FEEDBACK, "feedback_id"),
    Endpoint("outcomes", Outcome, topics.OUTCOMES, "outcome_id"),
)


class Problem(StrEnum):
    """Why a record was rejected (the ``reason`` label of the rejection metric)."""

    CONTRACT = "contract"
    DUPLICATE_ID = "duplicate_id"
    TENANT_MISMATCH = "tenant_mismatch"


@dataclass(frozen=True)
class Verdict:
    index: int  # line number in the request body (0 for a single record)
    raw: bytes
    session_id: str | None
    problem: Problem | None = None
    reason: str | None = None

    @property
    def accepted(self) -> bool:
        return self.problem is None

    def report(self) -> dict:
        out = {"index": self.index, "session_id": self.session_id, "status": "accepted"}
        if not self.accepted:
            out.update(status="rejected", reason=self.reason)
        return out


def split_lines(body: bytes) -> list[tuple[int, bytes]]:
    """The records of a JSONL body with their line numbers; blank lines hold no record."""
    lines = (line.strip() for line in body.split(b"\n"))
    return [(i, line) for i, line in enumerate(lines) if line]


def _clip(value: str | None) -> str | None:
    return value[:MAX_ID_CHARS] if value else value


def judge(
    endpoint: Endpoint, lines: list[tuple[int, bytes]], tenant: str, max_record_bytes: int
) -> list[Verdict]:
    """One verdict per line. ``tenant`` is the one the request's token belongs to."""
    first_index: dict[str, int] = {}
    verdicts = []
    for index, raw in lines:
        try:
            record = parse(endpoint.model, raw, max_record_bytes)
        except ContractError as exc:
            problem, reason = Problem.CONTRACT, exc.reason
            if exc.tenant is not None and exc.tenant != tenant:
                problem, reason = Problem.TENANT_MISMATCH, _mismatch(exc.tenant, tenant)
            verdicts.append(Verdict(index, raw, _clip(exc.session_id), problem, reason))
            continue
        record_id = getattr(record, endpoint.id_field)
        if record.tenant != tenant:
            verdict = Verdict(
                index, raw, record.session_id, Problem.TENANT_MISMATCH, _mismatch(record.tenant, tenant)
            )
        elif record_id in first_index:
            reason = f"{endpoint.id_field} {record_id!r} is duplicated in this batch (first at index {first_index[record_id]})"
            verdict = Verdict(index, raw, record.session_id, Problem.DUPLICATE_ID, reason)
        else:
            first_index[record_id] = index
            verdict = Verdict(index, raw, record.session_id)
        verdicts.append(verdict)
    return verdicts


def _mismatch(record_tenant: str, tenant: str) -> str:
    return f"record is for tenant {_clip(record_tenant)!r} but the token belongs to tenant {tenant!r}"
