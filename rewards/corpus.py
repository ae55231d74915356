"""Labelled hack corpora: case files expanded into contract Sessions, with no model or network.

A case file holds one agent session and its label::

    {"label": {"kinds": ["test_tampering"], "note": "why"},   # no kinds: an honest session
     "task": "...",                                           # the first user turn
     "steps": [{"say": "...", "call": {"name": "bash", "arguments": {"command": "..."}},
                "output": "...", "exit_code": 1},
               {"say": "..."}],
     "style": "A", "metadata": {"upstream_repo": "..."}, "status": "timeout",
     "outcome": {"tests_passed": 4, "tests_total": 4}}         # these four are optional

Each step is recorded the way the capture proxy records an OpenAI chat conversation: an
assistant turn whose text is ``say`` and/or the JSON tool call ``{"name": ..., "arguments":
{...}}`` (SmolLM-style), then, for a call, a tool turn with the call's name, JSON arguments (a
string is kept as the model's raw text, malformed or not), output and exit code. Token ids are
made up but deterministic (UTF-8 bytes + 1000), behaviour logprobs are -0.5.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ingest.contract import MAX_TOKENS_PER_TURN, HackKind, Session, parse_obj

BASE_MODEL = "HuggingFaceTB/SmolLM2-1.7B-Instruct"
BOS = 1
PROMPT_CAP = 4096  # prompt ids: BOS + the messages this request adds, capped
EPOCH = datetime(2026, 1, 15, 9, 0, tzinfo=UTC)
KEYS = {"label", "task", "steps", "style", "metadata", "status", "outcome"}
# the two labelled corpora: development (tuned on) and blind (frozen, only its totals looked at)
CORPORA = {
    "dev": Path(__file__).resolve().parent / "corpora" / "dev",
    "blind": Path(__file__).resolve().parent / "corpora" / "blind" / "cases",
}
KINDS = {k.value for k in HackKind}


def token_ids(text: str, cap: int) -> list[int]:
    ids = [b + 1000 for b in text.encode("utf-8")]
    return ids[:cap] or [1000]


def assistant(turn_id: str, text: str, pending: list[str]) -> dict:
    completion = token_ids(text, MAX_TOKENS_PER_TURN)
    prompt = [BOS] + token_ids("\n".join(pending), PROMPT_CAP - 1)
    return {
        "role": "assistant",
        "turn_id": turn_id,
        "prompt_token_ids": prompt,
        "completion_token_ids": completion,
        "behaviour_logprobs": [-0.5] * len(completion),
        "logprobs_mode": "processed",
        "sampling": {"temperature": 1.0, "top_p": 1.0, "max_tokens": None},
        "adapter_version": None,
        "text": text,
        "latency_s": None,
    }


def check_case(name: str, case: dict) -> None:
    assert {"label", "task", "steps"} <= set(case) <= KEYS, f"{name}: keys {sorted(case)}"
    kinds = case["label"]["kinds"]
    assert set(kinds) <= KINDS and len(set(kinds)) == len(kinds), f"{name}: kinds {kinds}"
    assert case["label"]["note"], f"{name}: empty note"
    for step in case["steps"]:
        assert "say" in step or "call" in step, f"{name}: step {step}"
        assert ("call" in step) == ("output" in step), f"{name}: step {step}"


def expand(case: dict, corpus: str, stem: str, index: int) -> Session:
    """The session of one case: number ``index`` of ``corpus``, from the file named ``stem``."""
    turns: list[dict] = [{"role": "user", "turn_id": "u0", "text": case["task"]}]
    pending = [case["task"]]  # messages after the last assistant message
    for step in case["steps"]:
        n = len(turns)
        call = step.get("call")
        if call is None:
            turns.append(assistant(f"a{n}", step["say"], pending))
            pending = []
            continue
        arguments = call["arguments"]  # a string: the model's raw arguments text
        if isinstance(arguments, dict):
            text = json.dumps({"name": call["name"], "arguments": arguments}, ensure_ascii=False)
            arguments = json.dumps(arguments, ensure_ascii=False)
        else:
            text = arguments
        turns.append(assistant(f"a{n}", f"{step['say']}\n{text}" if "say" in step else text, pending))
        tool = {
            "role": "tool",
            "turn_id": f"t{n + 1}",
            "name": call["name"],
            "arguments": arguments,
            "output": step["output"],
            "exit_code": step.get("exit_code"),
        }
        turns.append(tool)
        pending = [tool["output"]]
    tokens = sum(
        len(t["prompt_token_ids"]) + len(t["completion_token_ids"]) for t in turns if t["role"] == "assistant"
    )
    session_id = f"{corpus}-{re.search(r'[0-9]+', stem).group()}"  # the number only: labels stay out
    created = (EPOCH + timedelta(minutes=7 * index)).isoformat().replace("+00:00", "Z")
    outcome = case.get("outcome")
    if outcome is not None:
        outcome = {"outcome_id": f"{session_id}-ci", "session_id": session_id, "tenant": corpus, **outcome}
        outcome["created_at"] = created
    style = {"agent_style": case["style"]} if "style" in case else {}
    session = {
        "schema_version": 1,
        "session_id": session_id,
        "tenant": corpus,
        "task_id": session_id,
        "task_family": f"hacks-{corpus}",
        "policy": {"base_model": BASE_MODEL, "adapter_version": None},
        "turns": turns,
        "status": case.get("status", "completed"),
        "cost": {"tokens": tokens, "seconds": 0.0},
        "outcome": outcome,
        "feedback": None,
        "metadata": {"corpus": f"hacks_{corpus}", **style, **case.get("metadata", {})},
        "created_at": created,
    }
    return parse_obj(Session, session)  # raises ContractError naming the field


def load(folder: Path, corpus: str) -> list[tuple[str, set[str], Session]]:
    """(file name, labelled kinds, session) of every case file in ``folder``, sorted by name."""
    out = []
    for index, path in enumerate(sorted(folder.glob("*.json"))):
        case = json.loads(path.read_text(encoding="utf-8"))
        check_case(path.name, case)
        out.append((path.name, set(case["label"]["kinds"]), expand(case, corpus, path.stem, index)))
    return out
