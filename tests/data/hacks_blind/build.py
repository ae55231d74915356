"""Expand the blind case files (cases/NNN-name.json) into contract Sessions (NNN-name.json).

Each case is recorded the way the capture proxy records an OpenAI chat conversation: the task
is the first user turn; every tool call becomes an assistant turn whose text is the JSON tool
call ``{"name": ..., "arguments": {...}}`` (SmolLM-style), followed by a tool turn with the
call's name, JSON arguments, output and exit code; a ``say`` step is a plain assistant turn.
Token ids are made up but deterministic (UTF-8 bytes + 1000), behaviour logprobs are -0.5.
No model, no network. Run from the repository root:

    python tests/data/hacks_blind/build.py
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from ingest.contract import MAX_TOKENS_PER_TURN, Session, parse_obj  # noqa: E402

BASE_MODEL = "HuggingFaceTB/SmolLM2-1.7B-Instruct"
BOS = 1
PROMPT_CAP = 4096  # prompt ids: BOS + the messages this request adds, capped
EPOCH = datetime(2026, 1, 15, 9, 0, tzinfo=UTC)
STYLES = {"A", "B", "C"}
KINDS = {
    "test_tampering",
    "protected_access",
    "solution_fetching",
    "hardcoded_output",
    "exception_swallowing",
    "verifier_gaming",
}


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
    assert set(case) == {"label", "style", "task", "steps"}, f"{name}: keys {sorted(case)}"
    assert case["style"] in STYLES, f"{name}: style {case['style']!r}"
    kinds = case["label"]["kinds"]
    assert set(kinds) <= KINDS and len(set(kinds)) == len(kinds), f"{name}: kinds {kinds}"
    assert case["label"]["note"], f"{name}: empty note"
    calls = [s for s in case["steps"] if "call" in s]
    assert 3 <= len(calls) <= 12, f"{name}: {len(calls)} tool calls"
    for s in case["steps"]:
        assert ("say" in s) != ("call" in s), f"{name}: step {s}"


def expand(index: int, stem: str, case: dict) -> dict:
    turns: list[dict] = [{"role": "user", "turn_id": "u0", "text": case["task"]}]
    pending = [case["task"]]  # messages after the last assistant message
    for step in case["steps"]:
        n = len(turns)
        if "say" in step:
            turns.append(assistant(f"a{n}", step["say"], pending))
            pending = []
            continue
        call = step["call"]
        text = json.dumps({"name": call["name"], "arguments": call["arguments"]}, ensure_ascii=False)
        turns.append(assistant(f"a{n}", text, pending))
        tool = {
            "role": "tool",
            "turn_id": f"t{n + 1}",
            "name": call["name"],
            "arguments": json.dumps(call["arguments"], ensure_ascii=False),
            "output": step["output"],
            "exit_code": step.get("exit_code"),
        }
        turns.append(tool)
        pending = [tool["output"]]
    tokens = sum(
        len(t["prompt_token_ids"]) + len(t["completion_token_ids"]) for t in turns if t["role"] == "assistant"
    )
    created = (EPOCH + timedelta(minutes=7 * index)).isoformat().replace("+00:00", "Z")
    session = {
        "schema_version": 1,
        "session_id": f"blind-{stem[:3]}",  # the number only: names stay out of the record
        "tenant": "blind",
        "task_id": f"blind-{stem[:3]}",
        "task_family": "hacks-blind",
        "policy": {"base_model": BASE_MODEL, "adapter_version": None},
        "turns": turns,
        "status": "completed",
        "cost": {"tokens": tokens, "seconds": 0.0},
        "outcome": None,
        "feedback": None,
        "metadata": {"corpus": "hacks_blind", "agent_style": case["style"]},
        "created_at": created,
    }
    parsed = parse_obj(Session, session)  # raises ContractError naming the field
    return json.loads(parsed.model_dump_json())


def main() -> int:
    cases = sorted((HERE / "cases").glob("[0-9][0-9][0-9]-*.json"))
    written = set()
    for index, path in enumerate(cases):
        case = json.loads(path.read_text(encoding="utf-8"))
        check_case(path.name, case)
        session = expand(index, path.stem, case)
        out = HERE / path.name
        out.write_text(
            json.dumps({"label": case["label"], "session": session}, ensure_ascii=False) + "\n",
            encoding="utf-8",
        )
        written.add(out.name)
    for stale in HERE.glob("[0-9][0-9][0-9]-*.json"):
        if stale.name not in written:
            stale.unlink()
    print(f"wrote {len(written)} sessions to {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
