"""Findings and the flags they become: one flag per tool call, its evidence, the tokens to mask."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ingest.contract import HackFlag, HackKind, TokenSpan
from rewards.trace import Call


@dataclass(frozen=True)
class Finding:
    call: Call
    evidence: str


def short(text: str, n: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def flags(kind: HackKind, findings: Iterable[Finding]) -> list[HackFlag]:
    """One flag per tool call, evidence joined, spanning the whole completion of the assistant
    turn that emitted the call (the masking policy: the tokens that made the hack)."""
    by_call: dict[int, list[Finding]] = {}
    for f in findings:
        by_call.setdefault(f.call.index, []).append(f)
    out = []
    for index in sorted(by_call):
        group = by_call[index]
        call = group[0].call
        evidence = "; ".join(dict.fromkeys(f.evidence for f in group))
        spans = []
        if call.assistant_turn_id is not None:
            spans.append(TokenSpan(turn_id=call.assistant_turn_id, start=0, end=call.completion_len))
        out.append(HackFlag(kind=kind, evidence=f"{call.tool_turn_id}: {evidence}"[:4000], spans=spans))
    return out
