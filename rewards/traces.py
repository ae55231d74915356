"""Production sessions as MLflow traces, and reviewers' verdicts on them back as feedback.

``ratchet traces run`` consumes ``rewarded.v1`` (its own consumer group) and logs each rewarded
session, or a sample of them (``traces_sample_rate``, by a hash of the session id, so a restart
keeps the same sample), to the MLflow experiment ``traces_experiment`` as one trace:

- a root span ``session`` (the agent's task in, its last answer out; tenant, task, served
  versions, reward and revision as attributes), and one span per turn in order: ``user``, an
  ``assistant`` LLM span (prompt and completion token counts, latency, the adapter version that
  served it, the mean behaviour logprob) and a ``tool`` span (name, arguments, output, exit code);
- the trace's tags ``ratchet.session_id``, ``ratchet.tenant``, ``ratchet.reward``,
  ``ratchet.flags`` (hack kinds) for search, and MLflow's session and user metadata (session id,
  tenant) for the Sessions view;
- assessments from Ratchet (source ``CODE``): ``reward`` and each ``reward/<component>``, a
  ``hack/<kind>`` per detector flag with its evidence as rationale (and the judge's verdict), and
  ``excluded`` with its reason.

A revision is logged once: the exporter looks its key (``<session>@r<revision>``) up before
logging, and commits its input offsets only after the batch is logged, so a kill at any moment
neither loses a sampled session nor logs it twice.

Reviewers close the loop in MLflow: a **human** assessment on a trace (thumbs up/down, or the
value ``"accept"``, ``"reject"`` or ``"edit"``) is forwarded every ``traces_feedback_poll_s`` as
a ``Feedback`` record of that session to ``feedback.v1`` — tenant and session from the trace's own
tags, never from the reviewer — with id ``mlflow-<assessment id>``, so the rewards join counts it
once however often it is sent, and the trace is tagged ``ratchet.forwarded.<assessment id>`` once
the broker has acknowledged it. Review in MLflow thus changes the reward the learner sees. Only
the ``traces_feedback_scan`` most recent traces are scanned for new assessments.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from ingest import topics
from ingest.brokers import client_config
from ingest.config import ConfigError, load
from ingest.contract import (
    AssistantTurn,
    ContractError,
    Feedback,
    FeedbackKind,
    RewardedSession,
    ToolTurn,
    UserTurn,
    parse,
)
from ingest.producer import Outgoing, RecordProducer
from learner.store import BASE

log = logging.getLogger("ratchet.traces")

SOURCE_ID = "ratchet"
FORWARDED = "ratchet.forwarded."
MAX_TEXT = 20_000  # characters of a turn's text kept in its span


@dataclass(frozen=True)
class TraceSettings:
    kafka_bootstrap: str = "127.0.0.1:19092"  # Kafka bootstrap servers, host:port[,host:port...]
    mlflow_url: str = "http://127.0.0.1:15000"  # MLflow server the traces go to
    traces_enabled: bool = True  # off: `ratchet traces run` exits at once
    traces_sample_rate: float = 1.0  # share of sessions logged, by a hash of the session id
    traces_experiment: str = "ratchet-sessions"  # MLflow experiment of the session traces
    traces_topic: str = topics.REWARDED  # where rewarded sessions are read
    traces_group: str = "ratchet-traces"  # the exporter's consumer group
    # consumer group session timeout: how soon a dead exporter's partitions move to another one (a
    # new group on Tansu forms after half of it; librdkafka's default, 45 s, took 24 s)
    traces_session_timeout_s: float = 10.0
    traces_batch_max: int = 200  # records read per batch
    traces_feedback_poll_s: float = 30.0  # how often human assessments are forwarded as feedback
    traces_feedback_scan: int = 500  # most recent traces scanned for new human assessments
    traces_health_host: str = "127.0.0.1"  # the address the exporter's /health binds to
    traces_health_port: int = 0  # /health and /metrics of the exporter; 0: none


def load_trace_settings(**overrides) -> TraceSettings:
    return load(TraceSettings, "traces", **overrides)


def sampled(session_id: str, rate: float) -> bool:
    """Whether ``session_id`` is in the sample: the same answer in every process, every time."""
    if rate >= 1.0:
        return True
    digest = hashlib.sha256(session_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < rate


def key_of(rewarded: RewardedSession) -> str:
    return f"{rewarded.session_id}@r{rewarded.revision}"


def _ns(at: datetime) -> int:
    return int(at.timestamp() * 1e9)


def _short(text: str | None) -> str:
    text = text or ""
    return (
        text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + f"... ({len(text) - MAX_TEXT} more characters)"
    )


def log_trace(rewarded: RewardedSession, experiment_id: str) -> str:
    """Log one rewarded session as a trace with its assessments; returns the trace id."""
    import mlflow
    from mlflow.entities import AssessmentSource, SpanType
    from mlflow.tracing.constant import TraceMetadataKey

    session = rewarded.session
    turns = session.turns
    # Turns carry latencies, not times: they are laid out one after another, ending when the
    # session was recorded.
    end_ns = _ns(session.created_at)
    durations = [
        int((t.latency_s or 0.0) * 1e9) if isinstance(t, AssistantTurn) else 1_000_000 for t in turns
    ]
    start_ns = end_ns - sum(durations) - 1_000_000
    assistants = session.assistant_turns()
    versions = sorted({t.adapter_version or BASE for t in assistants})
    first_user = next((t.text for t in turns if isinstance(t, UserTurn)), "")
    flags = sorted({f.kind.value for f in rewarded.flags})
    root = mlflow.start_span_no_context(
        "session",
        span_type=SpanType.AGENT,
        inputs={"task": _short(first_user)},
        attributes={
            "ratchet.tenant": session.tenant,
            "ratchet.task_id": session.task_id or "",
            "ratchet.task_family": session.task_family or "",
            "ratchet.adapter_versions": ",".join(versions),
            "ratchet.status": session.status.value,
            "ratchet.reward": rewarded.reward,
            "ratchet.revision": rewarded.revision,
            "ratchet.tokens": session.cost.tokens,
        },
        tags={
            "ratchet.key": key_of(rewarded),
            "ratchet.session_id": session.session_id,
            "ratchet.tenant": session.tenant,
            "ratchet.task_id": session.task_id or "",
            "ratchet.reward": f"{rewarded.reward:.4f}",
            "ratchet.flags": ",".join(flags) or "none",
            "ratchet.excluded": str(rewarded.excluded).lower(),
        },
        metadata={
            TraceMetadataKey.TRACE_SESSION: session.session_id,
            TraceMetadataKey.TRACE_USER: session.tenant,
        },
        experiment_id=experiment_id,
        start_time_ns=start_ns,
    )
    at = start_ns + 500_000
    for turn, duration in zip(turns, durations, strict=True):
        if isinstance(turn, AssistantTurn):
            logprobs = turn.behaviour_logprobs
            span = mlflow.start_span_no_context(
                f"assistant {turn.turn_id}",
                span_type=SpanType.LLM,
                parent_span=root,
                inputs={"prompt_tokens": len(turn.prompt_token_ids)},
                attributes={
                    "ratchet.adapter_version": turn.adapter_version or BASE,
                    "ratchet.prompt_tokens": len(turn.prompt_token_ids),
                    "ratchet.completion_tokens": len(turn.completion_token_ids),
                    "ratchet.latency_s": turn.latency_s or 0.0,
                    "ratchet.mean_logprob": sum(logprobs) / len(logprobs),
                    "ratchet.temperature": turn.sampling.temperature,
                },
                start_time_ns=at,
            )
            span.end(outputs={"text": _short(turn.text)}, end_time_ns=at + duration)
        elif isinstance(turn, ToolTurn):
            span = mlflow.start_span_no_context(
                f"tool {turn.name}",
                span_type=SpanType.TOOL,
                parent_span=root,
                inputs={"arguments": _short(turn.arguments)},
                attributes={"ratchet.turn_id": turn.turn_id, "ratchet.exit_code": turn.exit_code},
                start_time_ns=at,
            )
            span.end(outputs={"output": _short(turn.output)}, end_time_ns=at + duration)
        else:
            span = mlflow.start_span_no_context(
                f"user {turn.turn_id}", span_type=SpanType.UNKNOWN, parent_span=root,
                inputs={"text": _short(turn.text)}, start_time_ns=at,
            )  # fmt: skip
            span.end(end_time_ns=at + duration)
        at += duration
    last = assistants[-1].text if assistants else ""
    root.end(outputs={"text": _short(last)}, end_time_ns=end_ns)
    trace_id = root.trace_id
    mlflow.flush_trace_async_logging()  # the trace must exist on the server before its assessments

    code = AssessmentSource(source_type="CODE", source_id=f"{SOURCE_ID}-rewards")
    mlflow.log_feedback(trace_id=trace_id, name="reward", value=float(rewarded.reward), source=code)
    for name, value in sorted(rewarded.components.items()):
        mlflow.log_feedback(trace_id=trace_id, name=f"reward/{name}", value=float(value), source=code)
    detectors = AssessmentSource(source_type="CODE", source_id=f"{SOURCE_ID}-detectors")
    for flag in rewarded.flags:
        mlflow.log_feedback(
            trace_id=trace_id,
            name=f"hack/{flag.kind.value}",
            value=True,
            source=detectors,
            rationale=_short(flag.evidence),
            metadata={"action": flag.action, "judge_verdict": flag.judge_verdict or ""},
        )
    if rewarded.excluded:
        mlflow.log_feedback(
            trace_id=trace_id, name="excluded", value=True, source=code, rationale=rewarded.exclusion_reason
        )
    return trace_id


def find_trace(experiment_id: str, key: str) -> str | None:
    import mlflow

    found = mlflow.search_traces(
        locations=[experiment_id],
        filter_string=f"tag.`ratchet.key` = '{key}'",
        max_results=1,
        include_spans=False,
        return_type="list",
    )
    return found[0].info.trace_id if found else None


def verdict(value: object) -> FeedbackKind | None:
    """The feedback kind a reviewer's assessment value means (thumbs up/down or a kind's name)."""
    if isinstance(value, bool):
        return FeedbackKind.ACCEPT if value else FeedbackKind.REJECT
    if isinstance(value, str) and value.strip().lower() in {k.value for k in FeedbackKind}:
        return FeedbackKind(value.strip().lower())
    return None


def pending_feedback(experiment_id: str, scan: int) -> list[tuple[str, Feedback]]:
    """(trace id, feedback) for each human assessment not forwarded yet, on the ``scan`` latest traces."""
    import mlflow

    traces = mlflow.search_traces(
        locations=[experiment_id],
        max_results=scan,
        order_by=["timestamp_ms DESC"],
        include_spans=False,
        return_type="list",
    )
    out = []
    for trace in traces:
        info = trace.info
        tags = info.tags or {}
        sid, tenant = tags.get("ratchet.session_id"), tags.get("ratchet.tenant")
        if not sid or not tenant:
            continue  # not a trace of this exporter
        for assessment in info.assessments or []:
            source = assessment.source
            if (
                source is None
                or str(source.source_type) != "HUMAN"
                or f"{FORWARDED}{assessment.assessment_id}" in tags
            ):
                continue
            value = assessment.feedback.value if assessment.feedback is not None else None
            kind = verdict(value)
            if kind is None:
                log.info(
                    "trace %s: assessment %s value %r is not a verdict; skipped",
                    info.trace_id,
                    assessment.name,
                    value,
                )
                continue
            comment = assessment.rationale or f"MLflow assessment {assessment.name!r} by {source.source_id}"
            feedback = Feedback(
                feedback_id=f"mlflow-{assessment.assessment_id}",
                session_id=sid,
                tenant=tenant,
                kind=kind,
                comment=comment[:10_000],
            )
            out.append((info.trace_id, feedback))
    return out


class TraceExporter:
    def __init__(self, settings: TraceSettings, progress: Callable[[str], None] = print):
        import mlflow
        from confluent_kafka import Consumer

        if not 0.0 <= settings.traces_sample_rate <= 1.0:
            raise ConfigError(f"traces_sample_rate must be in [0, 1], got {settings.traces_sample_rate}")
        if settings.traces_session_timeout_s < 1:
            raise ConfigError(
                f"traces_session_timeout_s must be at least 1, got {settings.traces_session_timeout_s}"
            )
        self.settings, self.progress = settings, progress
        mlflow.set_tracking_uri(settings.mlflow_url)
        experiment = mlflow.get_experiment_by_name(settings.traces_experiment)
        self.experiment_id = (
            experiment.experiment_id if experiment else mlflow.create_experiment(settings.traces_experiment)
        )
        self.consumer = Consumer(
            client_config(
                settings.kafka_bootstrap,
                **{
                    "group.id": settings.traces_group,
                    "session.timeout.ms": int(settings.traces_session_timeout_s * 1000),
                    "heartbeat.interval.ms": max(100, int(settings.traces_session_timeout_s * 1000 / 3)),
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                },
            )
        )
        self.consumer.subscribe([settings.traces_topic])
        self.producer = RecordProducer(settings.kafka_bootstrap)
        self.counts = {
            "read": 0,
            "logged": 0,
            "already_logged": 0,
            "not_sampled": 0,
            "invalid": 0,
            "forwarded": 0,
        }
        self._last_poll = 0.0

    def close(self) -> None:
        self.consumer.close()
        self.producer.close()

    def step(self, timeout_s: float = 1.0) -> int:
        """Log the next batch of rewarded sessions, then commit; returns the records read."""
        messages = self.consumer.consume(self.settings.traces_batch_max, timeout=timeout_s)
        records = [m for m in messages if m.error() is None]
        for message in records:
            self.counts["read"] += 1
            if any(key == topics.REWARDED_MARKER_HEADER for key, _ in message.headers() or ()):
                continue  # a reward worker's position marker, not a rewarded session
            try:
                rewarded = parse(RewardedSession, message.value())
            except ContractError as exc:
                self.counts["invalid"] += 1
                log.warning(
                    "%s@%d is not a rewarded session: %s", message.topic(), message.offset(), exc.reason
                )
                continue
            if not sampled(rewarded.session_id, self.settings.traces_sample_rate):
                self.counts["not_sampled"] += 1
            elif find_trace(self.experiment_id, key_of(rewarded)) is not None:
                self.counts["already_logged"] += 1
            else:
                log_trace(rewarded, self.experiment_id)
                self.counts["logged"] += 1
        if records:
            self.consumer.commit(asynchronous=False)
        return len(records)

    def forward_feedback(self) -> int:
        """Produce a feedback record for each new human assessment; returns how many."""
        from mlflow import MlflowClient

        pending = pending_feedback(self.experiment_id, self.settings.traces_feedback_scan)
        if not pending:
            return 0
        deliveries = self.producer.produce(
            [Outgoing(topics.FEEDBACK, f.session_id, f.to_json()) for _, f in pending]
        )
        client = MlflowClient(self.settings.mlflow_url)
        sent = 0
        for (trace_id, feedback), delivery in zip(pending, deliveries, strict=True):
            if delivery.ok:  # tagged only once acknowledged: a failure is sent again next time
                client.set_trace_tag(
                    trace_id, f"{FORWARDED}{feedback.feedback_id.removeprefix('mlflow-')}", "1"
                )
                sent += 1
        self.counts["forwarded"] += sent
        return sent

    def run_forever(self, stop: Callable[[], bool], beat: Callable[..., None] = lambda **_: None) -> None:
        self.progress(
            f"traces: {self.settings.traces_topic} on {self.settings.kafka_bootstrap} -> MLflow "
            f"{self.settings.mlflow_url} experiment {self.settings.traces_experiment!r} "
            f"(sample rate {self.settings.traces_sample_rate:g})"
        )
        while not stop():
            self.step()
            if time.monotonic() - self._last_poll >= self.settings.traces_feedback_poll_s:
                self.forward_feedback()
                self._last_poll = time.monotonic()
            beat(**self.counts)
