"""Small, valid example records: documentation for producers and test material."""

from __future__ import annotations

import random

from ingest.contract import AssistantTurn, Cost, Feedback, Outcome, PolicyRef, Session, ToolTurn, UserTurn


def example_session(
    session_id: str = "s-0001",
    tenant: str = "acme",
    task_id: str | None = "calc-17",
    n_tokens: int = 12,
    seed: int = 0,
    adapter_version: str | None = None,
    **overrides,
) -> Session:
    rng = random.Random(seed)
    tokens = [rng.randrange(0, 49_152) for _ in range(n_tokens)]
    logprobs = [-round(rng.random() * 3, 4) for _ in range(n_tokens)]
    fields = dict(
        session_id=session_id,
        tenant=tenant,
        task_id=task_id,
        policy=PolicyRef(base_model="smollm2-135m-instruct", adapter_version=adapter_version),
        turns=[
            UserTurn(turn_id="u0", text="What is 17 * 23? Use the calculator."),
            AssistantTurn(
                turn_id="a0",
                prompt_token_ids=[1, 9690, 198, 2683, 359],
                completion_token_ids=tokens,
                behaviour_logprobs=logprobs,
                adapter_version=adapter_version,
                text='{"name": "calculator", "arguments": {"expression": "17*23"}}',
            ),
            ToolTurn(
                turn_id="t0",
                name="calculator",
                arguments='{"expression": "17*23"}',
                output="391",
                exit_code=0,
            ),
        ],
        status="completed",
        cost=Cost(tokens=n_tokens + 5, seconds=1.5),
    )
    fields.update(overrides)
    return Session(**fields)


def example_feedback(
    session_id: str = "s-0001", tenant: str = "acme", kind: str = "accept", feedback_id: str = "f-0001"
) -> Feedback:
    return Feedback(feedback_id=feedback_id, session_id=session_id, tenant=tenant, kind=kind)


def example_outcome(
    session_id: str = "s-0001",
    tenant: str = "acme",
    passed: int = 3,
    total: int = 4,
    outcome_id: str = "o-0001",
) -> Outcome:
    return Outcome(
        outcome_id=outcome_id, session_id=session_id, tenant=tenant, tests_passed=passed, tests_total=total
    )
