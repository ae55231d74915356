"""Small hand-made sessions for the extractor and detector tests.

``session(step, ...)`` turns steps into a valid :class:`Session`: each tool step
becomes an assistant turn that emits the call followed by the tool turn.
"""

from __future__ import annotations

import json
import zlib

from ingest.contract import AssistantTurn, Cost, PolicyRef, Session, ToolTurn, UserTurn


def bash(command: str, output: str = "", exit_code: int = 0) -> tuple:
    return ("bash", {"command": command}, output, exit_code)


def read(path: str, content: str) -> tuple:
    return ("read_file", {"path": path}, content, 0)


def write(path: str, content: str) -> tuple:
    return ("write_file", {"path": path, "content": content}, f"wrote {path}", 0)


def replace(path: str, old: str, new: str) -> tuple:
    return ("edit_file", {"path": path, "old_str": old, "new_str": new}, f"edited {path}", 0)


def patch(diff: str) -> tuple:
    return ("apply_patch", {"patch": diff}, "applied", 0)


def tool(
    name: str, arguments: str, output: str = "", exit_code: int | None = 0, text: str | None = None
) -> tuple:
    """A tool call with raw argument text (may be malformed), emitted by an assistant turn saying ``text``."""
    return (name, arguments, output, exit_code, text)


def say(text: str) -> tuple:
    return ("say", text)


def _tokens(text: str, n: int | None = None) -> list[int]:
    seed = zlib.crc32(text.encode())
    n = n or max(3, min(64, len(text) // 4))
    return [(seed + 7919 * i) % 49_152 for i in range(n)]


def session(
    *steps: tuple,
    session_id: str = "s-hand-1",
    task: str = "Fix the failing test in this repository.",
    **fields,
) -> Session:
    turns: list = [UserTurn(turn_id="u0", text=task)]
    for i, step in enumerate(steps):
        if step[0] == "say":
            text = step[1]
            tokens = _tokens(text)
            turns.append(
                AssistantTurn(
                    turn_id=f"a{i}",
                    prompt_token_ids=[1, 2, 3],
                    completion_token_ids=tokens,
                    behaviour_logprobs=[-0.5] * len(tokens),
                    text=text,
                )
            )
            continue
        name, args, output, exit_code = step[:4]
        arguments = args if isinstance(args, str) else json.dumps(args)
        call = json.dumps({"name": name, "arguments": args}) if not isinstance(args, str) else None
        call = step[4] if len(step) > 4 else call
        tokens = _tokens(arguments)
        turns.append(
            AssistantTurn(
                turn_id=f"a{i}",
                prompt_token_ids=[1, 2, 3],
                completion_token_ids=tokens,
                behaviour_logprobs=[-0.5] * len(tokens),
                text=call,
            )
        )
        turns.append(
            ToolTurn(turn_id=f"t{i}", name=name, arguments=arguments, output=output, exit_code=exit_code)
        )
    fields.setdefault("policy", PolicyRef(base_model="smollm2-135m-instruct"))
    fields.setdefault("status", "completed")
    fields.setdefault("cost", Cost(tokens=1000, seconds=10.0))
    return Session(session_id=session_id, tenant="acme", turns=turns, **fields)


def detected(*steps, task: str = "Fix the bug; the tests must pass.") -> set[str]:
    """The kinds the detectors find, with default settings, in a session of these steps."""
    from rewards.detectors import detect
    from rewards.scoring import RewardSettings

    return {f.kind.value for f in detect(session(*steps, task=task), RewardSettings())}
