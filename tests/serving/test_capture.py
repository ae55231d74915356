"""What the proxy records from a request and returns to the client (pure logic)."""

import pytest

from ingest.contract import SamplingParams
from serving.capture import (
    CHAT,
    COMPLETION,
    BadRequest,
    StreamedTokens,
    check_request,
    client_view,
    message_turns,
    request_turns,
    sampling_of,
    served_tokens,
    upstream_body,
)

CALL = {"id": "call-1", "type": "function", "function": {"name": "calculator", "arguments": '{"x": "2+2"}'}}


def test_new_messages_after_the_last_assistant_message_become_turns():
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "example question"},
        {"role": "assistant", "content": "example answer"},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call-1", "content": "4"},
        {
            "role": "tool",
            "tool_call_id": "call-9",
            "name": "search",
            "content": [{"type": "text", "text": "none"}],
        },
        {"role": "user", "content": [{"type": "text", "text": "so?"}]},
    ]
    assert message_turns(messages, first_index=5) == [
        {"role": "tool", "turn_id": "t5", "name": "calculator", "arguments": '{"x": "2+2"}', "output": "4"},
        {"role": "tool", "turn_id": "t6", "name": "search", "arguments": "", "output": "none"},
        {"role": "user", "turn_id": "u7", "text": "so?"},
    ]
    # Without an assistant message every user message is new; system messages are not turns.
    assert message_turns(messages[:2], first_index=0) == [
        {"role": "user", "turn_id": "u0", "text": "example question"}
    ]


def test_vllm_is_asked_for_ids_and_logprobs_with_explicit_sampling():
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    up = upstream_body(body, CHAT, "policy-v3")
    assert up["model"] == "policy-v3" and up["logprobs"] is True and up["return_token_ids"] is True
    assert (up["temperature"], up["top_p"]) == (1.0, 1.0)  # OpenAI defaults made explicit
    assert body["model"] == "policy" and "logprobs" not in body  # the client's body is untouched
    assert upstream_body({"model": "m", "prompt": "x", "logprobs": 3}, COMPLETION, "m")["logprobs"] == 3
    assert upstream_body({"model": "m", "prompt": "x"}, COMPLETION, "m")["logprobs"] == 0
    assert sampling_of({"temperature": 0, "top_p": 0.9, "max_completion_tokens": 7}) == {
        "temperature": 0.0,
        "top_p": 0.9,
        "max_tokens": 7,
    }


CHAT_RESPONSE = {
    "model": "policy-v3",
    "prompt_token_ids": [1, 2, 3],
    "choices": [
        {
            "message": {"role": "assistant", "content": "Hi!"},
            "logprobs": {"content": [{"token": "Hi", "logprob": -0.5}, {"token": "!", "logprob": -0.25}]},
            "token_ids": [10, 11],
        }
    ],
}


def test_served_tokens_of_chat_and_completion_responses():
    assert served_tokens(CHAT_RESPONSE, CHAT) == {
        "prompt_token_ids": [1, 2, 3],
        "completion_token_ids": [10, 11],
        "behaviour_logprobs": [-0.5, -0.25],
        "text": "Hi!",
    }
    completion = {
        "choices": [
            {
                "text": "ab",
                "token_ids": [5, 6],
                "prompt_token_ids": [7],
                "logprobs": {"token_logprobs": [-1.0, -2.0]},
            }
        ]
    }
    assert served_tokens(completion, COMPLETION)["behaviour_logprobs"] == [-1.0, -2.0]
    with pytest.raises(ValueError, match="no token ids"):
        served_tokens({"choices": [{"message": {}, "logprobs": None}]}, CHAT)


def test_client_gets_only_what_it_asked_for_under_its_model_name():
    plain = client_view(CHAT_RESPONSE, {"model": "policy"}, CHAT)
    assert plain["model"] == "policy"
    assert plain["choices"][0]["logprobs"] is None
    assert "token_ids" not in plain["choices"][0] and "prompt_token_ids" not in plain
    full = client_view(CHAT_RESPONSE, {"model": "policy", "logprobs": True, "return_token_ids": True}, CHAT)
    assert full["choices"][0] == CHAT_RESPONSE["choices"][0] and full["prompt_token_ids"] == [1, 2, 3]


@pytest.mark.parametrize(
    ("body", "kind", "reason"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2}, CHAT, "n and best_of"),
        ({"model": "m", "messages": []}, CHAT, "messages"),
        ({"messages": [{"role": "user", "content": "x"}]}, CHAT, "'model' is required"),
        ({"model": "m", "prompt": ["a", "b"]}, COMPLETION, "batched prompts"),
        ({"model": "m", "prompt": "a", "echo": True}, COMPLETION, "echo"),
        ({"model": "m", "prompt": "a", "temperature": -1}, COMPLETION, "temperature"),
        ({"model": "m", "prompt": "a", "top_p": 0}, COMPLETION, "top_p"),
        (["not", "an", "object"], CHAT, "JSON object"),
    ],
)
def test_requests_the_proxy_cannot_record_are_refused_with_the_reason(body, kind, reason):
    with pytest.raises(BadRequest, match=reason):
        check_request(body, kind)


def test_a_request_adds_its_new_messages_then_the_assistant_turn():
    body = {"model": "policy", "messages": [{"role": "user", "content": "hi"}], "temperature": 0.7}
    served = served_tokens(CHAT_RESPONSE, CHAT)
    turns = request_turns(CHAT, body, served, index=4, adapter_version="v3", latency_s=0.25)
    assert [(t["role"], t["turn_id"]) for t in turns] == [("user", "u4"), ("assistant", "a5")]
    assistant = turns[1]
    assert assistant["behaviour_logprobs"] == [-0.5, -0.25] and assistant["adapter_version"] == "v3"
    assert assistant["sampling"] == {"temperature": 0.7, "top_p": 1.0, "max_tokens": None}
    assert assistant["logprobs_mode"] == "processed" and assistant["latency_s"] == 0.25
    empty = {**served, "completion_token_ids": [], "behaviour_logprobs": []}  # nothing generated: no turn
    assert request_turns(COMPLETION, {"model": "m", "prompt": "x"}, empty, 0, None, 0.1) == []


def test_sampling_a_trainer_cannot_reproduce_is_recorded():
    plain = SamplingParams(**sampling_of({"temperature": 0.7, "max_tokens": 16}))
    assert plain.unreproducible() is None and plain.max_tokens == 16
    for extra, reason in (
        ({"temperature": 0}, "greedy"),
        ({"top_p": 0.9}, "top_p"),
        ({"top_k": 40}, "top_k"),
        ({"min_p": 0.05}, "min_p"),
        ({"presence_penalty": 0.5}, "presence_penalty"),
        ({"frequency_penalty": 1}, "frequency_penalty"),
        ({"repetition_penalty": 1.1}, "repetition_penalty"),
    ):
        recorded = SamplingParams(**sampling_of({"temperature": 0.7, **extra}))
        assert recorded.unreproducible() == reason, extra
    assert SamplingParams(**sampling_of({"temperature": 0.7, "top_k": -1})).unreproducible() is None


def chat_chunk(ids: list[int], logprobs: list[float], content: str, **extra) -> dict:
    return {
        "model": "policy-v3",
        "choices": [
            {
                "index": 0,
                "delta": {"content": content},
                "logprobs": {"content": [{"token": "?", "logprob": lp} for lp in logprobs]},
                "finish_reason": None,
                "token_ids": ids,
                **extra,
            }
        ],
    }


def test_a_streamed_completion_assembles_to_what_the_whole_response_gives():
    chunks = [  # as vLLM streams them: the prompt ids first, then one or more tokens per chunk
        {
            "model": "policy-v3",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None}],
            "prompt_token_ids": [1, 2, 3],
        },
        chat_chunk([10], [-0.5], "Hi"),
        chat_chunk([11], [-0.25], "!", finish_reason="stop"),
        {"model": "policy-v3", "choices": [], "usage": {"total_tokens": 5}},
    ]
    streamed = StreamedTokens(CHAT)
    for chunk in chunks:
        streamed.add(chunk)
    assert streamed.served() == served_tokens(CHAT_RESPONSE, CHAT)
    assert streamed.usage == {"total_tokens": 5}
    # What the client sees of a chunk is cut as a whole response is.
    view = client_view(chunks[0], {"model": "policy"}, CHAT)
    assert view["model"] == "policy" and "prompt_token_ids" not in view
    assert "token_ids" not in client_view(chunks[1], {"model": "policy"}, CHAT)["choices"][0]

    unfinished = StreamedTokens(CHAT)
    for chunk in chunks[:2]:
        unfinished.add(chunk)
    with pytest.raises(ValueError, match="before its completion finished"):
        unfinished.served()


def test_a_streamed_plain_completion_and_tool_calls_assemble_too():
    streamed = StreamedTokens(COMPLETION)
    for text, ids, lps, extra in (
        ("a", [5], [-1.0], {"prompt_token_ids": [7]}),
        ("b", [6], [-2.0], {"prompt_token_ids": None, "finish_reason": "length"}),
    ):
        streamed.add(
            {"choices": [{"text": text, "token_ids": ids, "logprobs": {"token_logprobs": lps}, **extra}]}
        )
    assert streamed.served() == {
        "prompt_token_ids": [7],
        "completion_token_ids": [5, 6],
        "behaviour_logprobs": [-1.0, -2.0],
        "text": "ab",
    }
    calls = StreamedTokens(CHAT)
    calls.add({"prompt_token_ids": [1], "choices": [{"delta": {"role": "assistant"}}]})
    for delta, ids in (
        (
            {
                "index": 0,
                "id": "call-1",
                "type": "function",
                "function": {"name": "calculator", "arguments": ""},
            },
            [8],
        ),
        ({"index": 0, "function": {"arguments": '{"x": "2+2"}'}}, [9]),
    ):
        calls.add({"choices": [{"delta": {"tool_calls": [delta]}, "token_ids": ids,
                                "logprobs": {"content": [{"logprob": -0.1}]}}]})  # fmt: skip
    calls.add({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})
    whole = {
        "prompt_token_ids": [1],
        "choices": [
            {
                "message": {"role": "assistant", "content": None, "tool_calls": [CALL]},
                "logprobs": {"content": [{"logprob": -0.1}, {"logprob": -0.1}]},
                "token_ids": [8, 9],
            }
        ],
    }
    assert calls.served() == served_tokens(whole, CHAT)
