"""OpenAI tool calling end to end: the local vLLM parses tool calls (Hermes blocks, shown to the
model by ops/templates/smollm2_tools.jinja), the capture proxy records structured tool_calls and
`tool` messages as the contract's assistant and tool turns, and the session is rewarded and
becomes training rows like any other."""

from __future__ import annotations

import json
import uuid

import httpx
import openai

from ingest import topics
from ingest.contract import AssistantTurn, Session, ToolTurn
from learner.batching import rows_of
from ops.stack import TOOLS_TEMPLATE
from rewards.scoring import RewardSettings, reward_session
from serving.proxy import SESSION_HEADER, create_app
from tests.serving.conftest import AUTH, TOKENS, read_record, serving

CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression and return its value.",
        "strict": True,  # vLLM then holds the arguments to the schema (a 135M model needs it)
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "maxLength": 40}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    },
}


def test_without_tools_the_template_renders_what_the_models_own_does(model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    own = (model_dir / "chat_template.jinja").read_text()
    ours = TOOLS_TEMPLATE.read_text()
    conversations = [
        [{"role": "user", "content": "hi"}],
        [
            {"role": "system", "content": "You can call a calculator."},
            {"role": "user", "content": "What is 17*23?"},
            {"role": "assistant", "content": "391"},
            {"role": "user", "content": "Thanks."},
        ],
    ]
    for messages in conversations:
        for generation in (True, False):
            render = dict(tokenize=False, add_generation_prompt=generation)
            assert tokenizer.apply_chat_template(messages, chat_template=ours, **render) == (
                tokenizer.apply_chat_template(messages, chat_template=own, **render)
            )
    with_tools = tokenizer.apply_chat_template(
        conversations[0], chat_template=ours, tools=[CALCULATOR], tokenize=False, add_generation_prompt=True
    )
    assert '"name": "calculator"' in with_tools and "<tool_call>" in with_tools


def test_a_two_tool_call_session_is_captured_rewarded_and_trainable(proxy_settings, broker):
    sid = f"tools-{uuid.uuid4().hex[:12]}"
    with serving(create_app(proxy_settings)) as url:
        client = openai.OpenAI(
            base_url=f"{url}/v1", api_key=TOKENS["acme"], default_headers={SESSION_HEADER: sid}, max_retries=0
        )
        ask = dict(
            model="policy", tools=[CALCULATOR], max_tokens=80, temperature=0.7, seed=3
        )  # sampled: trainable
        # tool_choice "auto" (the OpenAI default) is served, whatever the small model chooses to do
        auto = client.chat.completions.create(
            messages=[{"role": "user", "content": "What is 2+2?"}],
            extra_headers={SESSION_HEADER: f"{sid}-auto"},
            **ask,
        )
        assert auto.choices[0].finish_reason in ("stop", "length", "tool_calls")

        messages: list[dict] = [{"role": "user", "content": "Compute 17*23, then add 9 to the result."}]
        calls = []
        for result in ("391", "400"):
            reply = client.chat.completions.create(messages=messages, tool_choice="required", **ask)
            (call,) = reply.choices[0].message.tool_calls[:1]
            assert call.function.name == "calculator"
            json.loads(call.function.arguments)  # the arguments are a JSON object
            calls.append(call)
            messages += [
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": call.id, "type": "function", "function": call.function.model_dump()}
                    ],
                },
                {"role": "tool", "tool_call_id": call.id, "content": result},
            ]
        final = client.chat.completions.create(messages=messages, **ask, tool_choice="none")
        assert final.choices[0].message.tool_calls in (None, [])
        ended = httpx.post(
            f"{url}/v1/sessions/{sid}/end",
            headers=AUTH,
            json={"status": "completed", "outcome": {"verifiers_passed": 1, "verifiers_total": 1}},
            timeout=60,
        )
        assert ended.status_code == 200, ended.text
        ended = ended.json()

    session = read_record(broker, Session, topics.SESSIONS, ended["partition"], ended["offset"])
    assert [t.role for t in session.turns] == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    tools = [t for t in session.turns if isinstance(t, ToolTurn)]
    assert [(t.name, json.loads(t.arguments), t.output) for t in tools] == [
        (c.function.name, json.loads(c.function.arguments), out)
        for c, out in zip(calls, ("391", "400"), strict=True)
    ]
    first, second, _ = session.assistant_turns()
    for turn, call in ((first, calls[0]), (second, calls[1])):
        assert isinstance(turn, AssistantTurn) and len(turn.completion_token_ids) == len(
            turn.behaviour_logprobs
        )
        assert json.loads(call.function.arguments) == json.loads(
            json.loads(turn.text)[0]["function"]["arguments"]
        )
    # the next request's prompt holds the call as the model was shown it
    assert second.prompt_token_ids[: len(first.prompt_token_ids)] == first.prompt_token_ids

    rewarded = reward_session(session, [], [], RewardSettings())
    assert rewarded.components and not rewarded.excluded
    rows = rows_of(rewarded, advantage=0.5)
    assert [r.completion_ids for r in rows] == [
        list(t.completion_token_ids) for t in session.assistant_turns()
    ]
    assert all(any(r.mask) for r in rows)
