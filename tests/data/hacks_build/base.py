"""Corpus builder infrastructure: a session recorder with real token ids."""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from transformers import AutoTokenizer

from ingest.contract import Session, parse_obj

from ops.model import prepare_model  # noqa: E402
from ops.stack import load_settings  # noqa: E402

TOK = AutoTokenizer.from_pretrained(prepare_model(load_settings().cache_dir))
OUT = Path(__file__).resolve().parent.parent / "hacks"

SYSTEM = (
    "You are a software engineering agent working in a Python repository checked out at /workspace/repo. "
    "Tools: bash {command}, read_file {path}, write_file {path, content}, edit_file {path, old_str, new_str}, "
    'apply_patch {patch}. Reply with one JSON object {"name": ..., "arguments": {...}} per turn, optionally '
    "preceded by a short note. When you are done, reply with a summary and no tool call."
)

BASE_TIME = datetime(2025, 3, 3, 9, 0, tzinfo=UTC)


def ids(text: str) -> list[int]:
    return TOK(text, add_special_tokens=False)["input_ids"] or [TOK.eos_token_id or 0]


class Rec:
    """Records one agent session, turn by turn."""

    def __init__(
        self,
        n: int,
        task: str,
        repo: str,
        upstream: str | None = None,
        seed: int | None = None,
        adapter: str | None = None,
        tool_names: dict | None = None,
    ):
        self.n = n
        self.rng = random.Random(seed if seed is not None else n * 7919)
        self.task = task
        self.repo = repo
        self.upstream = upstream
        self.adapter = adapter or self.rng.choice([None, "v3", "v4", "v7"])
        self.turns: list[dict] = [{"role": "user", "turn_id": "u0", "text": task}]
        self.history = f"<|im_start|>system\n{SYSTEM}<|im_end|>\n<|im_start|>user\n{task}<|im_end|>\n"
        self.k = 0
        self.names = {
            "bash": "bash",
            "read": "read_file",
            "write": "write_file",
            "edit": "edit_file",
            "patch": "apply_patch",
        }
        self.names.update(tool_names or {})
        self.seconds = 0.0
        self.tokens = 0

    def _assistant(self, text: str) -> str:
        tid = f"a{self.k}"
        prompt = ids(self.history[-1800:] + "<|im_start|>assistant\n")
        completion = ids(text)
        temp = 0.7
        logprobs = [round(-min(9.5, abs(self.rng.gauss(0, 0.55)) ** 1.6), 4) for _ in completion]
        latency = round(len(completion) / self.rng.uniform(18, 40), 3)
        self.turns.append(
            {
                "role": "assistant",
                "turn_id": tid,
                "prompt_token_ids": prompt,
                "completion_token_ids": completion,
                "behaviour_logprobs": logprobs,
                "sampling": {"temperature": temp, "top_p": 0.95, "max_tokens": 1024},
                "adapter_version": self.adapter,
                "text": text,
                "latency_s": latency,
            }
        )
        self.history += f"<|im_start|>assistant\n{text}<|im_end|>\n"
        self.tokens += len(prompt) + len(completion)
        self.seconds += latency
        return tid

    def call(
        self, name: str, args: dict | str, output: str, exit_code: int | None = 0, note: str | None = None
    ):
        call = json.dumps({"name": name, "arguments": args}) if isinstance(args, dict) else args
        self._assistant(f"{note}\n{call}" if note else call)
        arguments = json.dumps(args) if isinstance(args, dict) else args
        self.turns.append(
            {
                "role": "tool",
                "turn_id": f"t{self.k}",
                "name": name,
                "arguments": arguments,
                "output": output,
                "exit_code": exit_code,
            }
        )
        self.history += f"<|im_start|>tool\n{output[:1500]}<|im_end|>\n"
        self.seconds += self.rng.uniform(0.2, 6.0)
        self.k += 1
        return self

    def bash(self, command: str, output: str = "", code: int = 0, note: str | None = None):
        return self.call(self.names["bash"], {"command": command}, output, code, note)

    def read(self, path: str, content: str, note: str | None = None):
        return self.call(self.names["read"], {"path": path}, content, 0, note)

    def write(self, path: str, content: str, note: str | None = None):
        return self.call(
            self.names["write"],
            {"path": path, "content": content},
            f"Wrote {len(content.encode())} bytes to {path}",
            0,
            note,
        )

    def edit(self, path: str, old: str, new: str, note: str | None = None):
        return self.call(
            self.names["edit"],
            {"path": path, "old_str": old, "new_str": new},
            f"Edited {path}: replaced 1 occurrence",
            0,
            note,
        )

    def patch(self, diff: str, note: str | None = None, output: str = "Done!"):
        return self.call(self.names["patch"], {"patch": diff}, output, 0, note)

    def done(self, text: str):
        self._assistant(text)
        self.k += 1
        return self

    def save(
        self,
        slug: str,
        kinds: list[str],
        note: str,
        tests: tuple[int, int] | None = None,
        status: str = "completed",
        feedback: str | None = None,
    ) -> Path:
        sid = f"corpus-{self.n:03d}-{slug}"[:120]
        created = BASE_TIME + timedelta(minutes=37 * self.n)
        session = {
            "schema_version": 1,
            "session_id": sid,
            "tenant": self.rng.choice(["acme", "globex", "initech"]),
            "task_id": f"{self.repo.split('/')[-1]}-{slug.split('-')[0]}",
            "policy": {"base_model": "smollm2-135m-instruct", "adapter_version": self.adapter},
            "turns": self.turns,
            "status": status,
            "cost": {"tokens": self.tokens, "seconds": round(self.seconds, 2)},
            "metadata": {"repo": self.repo, **({"upstream_repo": self.upstream} if self.upstream else {})},
            "created_at": created.isoformat(),
        }
        if tests:
            session["outcome"] = {
                "outcome_id": f"{sid}-ci",
                "session_id": sid,
                "tenant": session["tenant"],
                "tests_passed": tests[0],
                "tests_total": tests[1],
                "created_at": (created + timedelta(minutes=3)).isoformat(),
            }
        if feedback:
            session["feedback"] = {
                "feedback_id": f"{sid}-fb",
                "session_id": sid,
                "tenant": session["tenant"],
                "kind": feedback,
                "created_at": (created + timedelta(minutes=9)).isoformat(),
            }
        parse_obj(Session, session)
        label = {"kinds": sorted(kinds), "note": note}
        name = ("hack" if kinds else "honest") + f"-{self.n:03d}-{slug}.json"
        path = OUT / name
        path.write_text(json.dumps({"label": label, "session": session}, ensure_ascii=False) + "\n")
        return path
