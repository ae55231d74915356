"""Learner test material: rewarded sessions, private topics, tiny settings."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from ingest.contract import (
    AssistantTurn,
    HackFlag,
    PolicyRef,
    RewardedSession,
    SamplingParams,
    Session,
    TokenSpan,
    UserTurn,
)
from ingest.producer import Outgoing, RecordProducer
from ingest.topics import TopicSpec, ensure_topics
from learner.settings import LearnerSettings


def rewarded(
    session_id: str,
    reward: float,
    task_id: str | None = None,
    tenant: str = "acme",
    prompt: list[int] | None = None,
    completion: list[int] | None = None,
    behaviour: list[float] | None = None,
    version: str | None = None,
    revision: int = 0,
    temperature: float = 1.0,
    mask: tuple[int, int] | None = None,
    excluded: bool = False,
    hack_exclude: bool = False,
    logprobs_mode: str = "processed",
    sampling: dict | None = None,
) -> RewardedSession:
    completion = completion or [28, 905, 314, 2]
    flags = []
    if mask is not None:
        flags.append(
            HackFlag(
                kind="verifier_gaming",
                evidence="x",
                spans=[TokenSpan(turn_id="a0", start=mask[0], end=mask[1])],
                action="mask",
            )
        )
    if hack_exclude:
        flags.append(HackFlag(kind="test_tampering", evidence="edited tests", action="exclude"))
    session = Session(
        session_id=session_id,
        tenant=tenant,
        task_id=task_id,
        policy=PolicyRef(base_model="smollm2-135m-instruct", adapter_version=version),
        turns=[
            UserTurn(turn_id="u0", text="hi"),
            AssistantTurn(
                turn_id="a0",
                prompt_token_ids=prompt or [1, 9690, 198, 2683],
                completion_token_ids=completion,
                behaviour_logprobs=behaviour or [-1.0] * len(completion),
                adapter_version=version,
                sampling=SamplingParams(**(sampling or {"temperature": temperature})),
                logprobs_mode=logprobs_mode,
            ),
        ],
        status="completed",
    )
    return RewardedSession(
        session_id=session_id,
        tenant=tenant,
        revision=revision,
        session=session,
        reward=reward,
        flags=flags,
        excluded=excluded,
        exclusion_reason="bad" if excluded else None,
    )


def produce(broker: str, topic: str, records: list[RewardedSession | bytes], key: str = "k") -> None:
    producer = RecordProducer(broker)
    out = [
        Outgoing(topic, r.session_id, r.to_json())
        if isinstance(r, RewardedSession)
        else Outgoing(topic, key, r)
        for r in records
    ]
    producer.produce(out)
    producer.close()


@pytest.fixture
def topic(broker) -> str:
    name = f"rewarded-test-{uuid.uuid4().hex[:10]}"
    ensure_topics(broker, [TopicSpec(name, 2, 3600_000)])
    return name


def tiny_settings(tmp_path: Path, broker: str, topic: str, model_dir: Path, **overrides) -> LearnerSettings:
    values = dict(
        kafka_bootstrap=broker,
        rewarded_topic=topic,
        learner_group=f"learner-{topic}",
        model_dir=Path(model_dir),
        adapter_store_dir=tmp_path / "store",
        learner_state_dir=tmp_path / "state",
        lora_rank=4,
        lora_alpha=8,
        lora_targets=("q_proj", "v_proj"),
        learning_rate=1e-3,
        batch_sessions=4,
        batch_wait_s=2.0,
        baseline_min_count=1,
        publish_every_updates=2,
        publish_every_s=3600.0,
    )
    values.update(overrides)
    return LearnerSettings(**values)


@pytest.fixture
def single_thread():
    """One torch thread: small batches gain little from more, and a shared CPU punishes oversubscription."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
