"""What the capture proxy records from one request and its vLLM response, and what it returns.

Pure functions over OpenAI-style JSON bodies. ``kind`` is ``"chat"``
(``/v1/chat/completions``) or ``"completion"`` (``/v1/completions``).

Turn rule for chat requests: the messages after the request's last assistant
message are new (all of them on a request without one). Each new ``user``
message becomes a ``UserTurn``; each new ``tool`` message a ``ToolTurn`` whose
name and arguments come from the matching ``tool_calls`` entry of that
assistant message (by ``tool_call_id``) and whose output is the message
content; system and developer messages are kept only in the prompt token ids.
Then the completion becomes an ``AssistantTurn``. Completion requests record
only the ``AssistantTurn`` (the prompt is in its prompt token ids).

A streamed completion (``stream: true``) is assembled chunk by chunk by
``StreamedTokens`` into what ``served_tokens`` reads from a whole response:
vLLM puts the prompt ids in the first chunk (top-level ``prompt_token_ids`` for
chat, the choice's ``prompt_token_ids`` for completions), the ids of each delta
in the choice's ``token_ids`` and their logprobs in the choice's ``logprobs``
(``content[*].logprob`` for chat, ``token_logprobs`` for completions). Each
chunk goes to the client through ``client_view``, as a whole response does.
"""

from __future__ import annotations

import json
from typing import Any

from ingest.contract import LogprobsMode

CHAT = "chat"
COMPLETION = "completion"


class BadRequest(ValueError):
    """A request the proxy refuses (HTTP 400); the message says why."""


def check_request(body: Any, kind: str) -> None:
    """Refuse what the proxy cannot record faithfully, naming the reason."""
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    if not isinstance(body.get("model"), str):
        raise BadRequest("'model' is required and must be a string")
    if body.get("n", 1) not in (1, None) or body.get("best_of", 1) not in (1, None):
        raise BadRequest("n and best_of must be 1: a session records one completion per request")
    if kind == CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("'messages' must be a non-empty list of message objects")
    else:
        prompt = body.get("prompt")
        single = isinstance(prompt, str) or (
            isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt)
        )
        if not single:
            raise BadRequest(
                "'prompt' must be one string or one list of token ids (batched prompts are refused)"
            )
        if body.get("echo"):
            raise BadRequest(
                "echo is not supported: a completion's logprobs must cover only generated tokens"
            )
    for name, ok, allowed in (
        ("temperature", lambda v: v >= 0, ">= 0"),
        ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"),
    ):
        value = body.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not ok(value):
            raise BadRequest(f"'{name}' must be a number {allowed}, got {value!r}")


_RECORDED = ("top_k", "min_p", "presence_penalty", "frequency_penalty", "repetition_penalty")


def sampling_of(body: dict) -> dict:
    """The sampling parameters of a request, with OpenAI defaults made explicit; the ones a
    trainer cannot reproduce (top-k, min-p, penalties) are recorded when the client sets them."""
    temperature = body.get("temperature")
    top_p = body.get("top_p")
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    out = {
        "temperature": 1.0 if temperature is None else float(temperature),
        "top_p": 1.0 if top_p is None else float(top_p),
        "max_tokens": max_tokens
        if isinstance(max_tokens, int) and not isinstance(max_tokens, bool)
        else None,
    }
    for name in _RECORDED:
        value = body.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[name] = int(value) if name == "top_k" else float(value)
    return out


def upstream_body(body: dict, kind: str, vllm_model: str) -> dict:
    """The request sent to vLLM: the client's, on the routed model, asking for token ids and logprobs."""
    sampling = sampling_of(body)
    out = {**body, "model": vllm_model, "temperature": sampling["temperature"], "top_p": sampling["top_p"]}
    out["return_token_ids"] = True
    if kind == CHAT:
        out["logprobs"] = True
    else:
        out["logprobs"] = body.get("logprobs") or 0
    return out


def served_tokens(response: dict, kind: str) -> dict:
    """Prompt ids, completion ids, per-token logprobs and text of the (single) choice vLLM returned."""
    choice = response["choices"][0]
    if kind == CHAT:
        prompt_ids = response.get("prompt_token_ids")
        content = (choice.get("logprobs") or {}).get("content") or []
        logprobs = [float(t["logprob"]) for t in content]
        message = choice.get("message") or {}
        text = message.get("content")
        if message.get("tool_calls"):
            text = (text or "") + json.dumps(message["tool_calls"])
    else:
        prompt_ids = choice.get("prompt_token_ids") or response.get("prompt_token_ids")
        logprobs = [float(x) for x in (choice.get("logprobs") or {}).get("token_logprobs") or []]
        text = choice.get("text")
    completion_ids = choice.get("token_ids")
    if not prompt_ids or completion_ids is None:
        raise ValueError("vLLM returned no token ids (does it support return_token_ids?)")
    return {
        "prompt_token_ids": prompt_ids,
        "completion_token_ids": completion_ids,
        "behaviour_logprobs": logprobs,
        "text": text,
    }


class StreamedTokens:
    """The served tokens of a streamed completion, assembled from its chunks in order."""

    def __init__(self, kind: str):
        self.kind = kind
        self.prompt_token_ids: list[int] | None = None
        self.completion_token_ids: list[int] = []
        self.behaviour_logprobs: list[float] = []
        self.texts: list[str] = []
        self.tool_calls: dict[int, dict] = {}  # by the delta's index
        self.finish_reason: str | None = None
        self.usage: dict | None = None

    def add(self, chunk: dict) -> None:
        self.usage = chunk.get("usage") or self.usage
        if self.kind == CHAT and chunk.get("prompt_token_ids"):
            self.prompt_token_ids = chunk["prompt_token_ids"]
        for choice in chunk.get("choices") or []:  # n == 1: at most one
            if self.kind == CHAT:
                delta = choice.get("delta") or {}
                if delta.get("content") is not None:
                    self.texts.append(delta["content"])
                for call in delta.get("tool_calls") or []:
                    self._add_tool_call(call)
                content = (choice.get("logprobs") or {}).get("content") or []
                self.behaviour_logprobs += [float(t["logprob"]) for t in content]
            else:
                if choice.get("prompt_token_ids"):
                    self.prompt_token_ids = choice["prompt_token_ids"]
                self.texts.append(choice.get("text") or "")
                token_logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
                self.behaviour_logprobs += [float(x) for x in token_logprobs]
            self.completion_token_ids += choice.get("token_ids") or []
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def _add_tool_call(self, delta: dict) -> None:
        call = self.tool_calls.setdefault(
            delta.get("index", len(self.tool_calls)),
            {"id": None, "type": "function", "function": {"name": None, "arguments": ""}},
        )
        call["id"] = delta.get("id") or call["id"]
        call["type"] = delta.get("type") or call["type"]
        function = delta.get("function") or {}
        call["function"]["name"] = function.get("name") or call["function"]["name"]
        call["function"]["arguments"] += function.get("arguments") or ""

    def served(self) -> dict:
        """What ``served_tokens`` gives for the whole response; refused before a finish reason."""
        if self.finish_reason is None:
            raise ValueError("the stream ended before its completion finished")
        if not self.prompt_token_ids:
            raise ValueError("vLLM streamed no token ids (does it support return_token_ids?)")
        text = "".join(self.texts) if self.texts or self.kind != CHAT else None
        if self.tool_calls:
            text = (text or "") + json.dumps([self.tool_calls[i] for i in sorted(self.tool_calls)])
        return {
            "prompt_token_ids": self.prompt_token_ids,
            "completion_token_ids": self.completion_token_ids,
            "behaviour_logprobs": self.behaviour_logprobs,
            "text": text,
        }


def _text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return json.dumps(content)


def message_turns(messages: list[dict], first_index: int) -> list[dict]:
    """User and tool turns of the messages after the last assistant message (see module docstring)."""
    last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
    calls = {}
    if last >= 0:
        for call in messages[last].get("tool_calls") or []:
            if isinstance(call, dict):
                calls[call.get("id")] = call.get("function") or {}
    turns = []
    for message in messages[last + 1 :]:
        index = first_index + len(turns)
        role = message.get("role")
        if role == "user":
            turns.append({"role": "user", "turn_id": f"u{index}", "text": _text(message.get("content"))})
        elif role == "tool":
            call = calls.get(message.get("tool_call_id"), {})
            arguments = call.get("arguments", "")
            turns.append(
                {
                    "role": "tool",
                    "turn_id": f"t{index}",
                    "name": str(call.get("name") or message.get("name") or "unknown"),
                    "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments),
                    "output": _text(message.get("content")),
                }
            )
    return turns


def assistant_turn(
    turn_id: str, served: dict, sampling: dict, adapter_version: str | None, latency_s: float
) -> dict:
    return {
        "role": "assistant",
        "turn_id": turn_id,
        "prompt_token_ids": served["prompt_token_ids"],
        "completion_token_ids": served["completion_token_ids"],
        "behaviour_logprobs": served["behaviour_logprobs"],
        "logprobs_mode": LogprobsMode.PROCESSED.value,
        "sampling": sampling,
        "adapter_version": adapter_version,
        "text": served["text"],
        "latency_s": round(latency_s, 6),
    }


def request_turns(
    kind: str, body: dict, served: dict, index: int, adapter_version: str | None, latency_s: float
) -> list[dict]:
    """The turns one request adds to its session, numbered from ``index``."""
    turns = message_turns(body["messages"], index) if kind == CHAT else []
    if served["completion_token_ids"]:
        turn = assistant_turn(f"a{index + len(turns)}", served, sampling_of(body), adapter_version, latency_s)
        turns.append(turn)
    return turns


def client_view(response: dict, body: dict, kind: str) -> dict:
    """vLLM's response without what the client did not ask for, under the model name it asked for."""
    out = {**response, "model": body["model"]}
    wants_ids = bool(body.get("return_token_ids"))
    wants_logprobs = bool(body.get("logprobs")) if kind == CHAT else body.get("logprobs") is not None
    choices = []
    for choice in response.get("choices", []):
        choice = dict(choice)
        if not wants_logprobs:
            choice["logprobs"] = None
        if not wants_ids:
            choice.pop("token_ids", None)
            choice.pop("prompt_token_ids", None)
        choices.append(choice)
    out["choices"] = choices
    if not wants_ids:
        out.pop("prompt_token_ids", None)
    return out
