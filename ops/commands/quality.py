"""ratchet quality"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from dataclasses import dataclass


class SampleError(RuntimeError):
    pass


@dataclass(frozen=True)
class Sampled:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes


def consume_sample(bootstrap: str, topic: str, limit: int, idle_timeout_s: float) -> list[Sampled]:
    """Up to ``limit`` records from the beginning of every partition of ``topic``.

    Stops after ``limit`` records or when nothing arrives for ``idle_timeout_s``
    (end offsets are not trusted: Tansu reports wrong ones). No consumer group
    is joined and no offset is committed."""
    from ingest.topics import TopicReadError, read_topic

    records: list[Sampled] = []
    idle_until = time.monotonic() + idle_timeout_s
    try:
        with contextlib.closing(read_topic(bootstrap, topic, strict=True)) as batches:
            while len(records) < limit and time.monotonic() < idle_until:
                for message in next(batches):
                    records.append(
                        Sampled(topic, message.partition(), message.offset(), message.key(), message.value())
                    )
                    idle_until = time.monotonic() + idle_timeout_s
    except TopicReadError as exc:
        raise SampleError(str(exc)) from None
    return records[:limit]


def run(args: argparse.Namespace) -> int:
    from ingest import topics
    from ingest.config import load
    from ingest.contract import ContractError, DeadLetter, RewardedSession, Session, parse
    from ingest.quality import QualitySettings, check_batch, log_to_mlflow, quarantine

    settings = load(QualitySettings, "quality")
    bootstrap = args.bootstrap or settings.kafka_bootstrap
    kind = args.kind or ("rewarded" if args.topic == topics.REWARDED else "session")
    model = RewardedSession if kind == "rewarded" else Session
    print(
        f"reading up to {args.sample} records from {args.topic} on {bootstrap} ...",
        file=sys.stderr,
        flush=True,
    )
    try:
        messages = consume_sample(bootstrap, args.topic, args.sample, args.idle_timeout)
    except SampleError as exc:
        print(f"ratchet quality: {exc}", file=sys.stderr)
        return 2

    records, broken = [], []
    for message in messages:
        try:
            records.append(parse(model, message.value))
        except ContractError as exc:
            where = f"{message.topic}[{message.partition}]@{message.offset}"
            broken.append((message, f"{where}: not a valid {kind} record: {exc.reason}"))
    print(
        f"read {len(messages)} records: {len(records)} valid {kind} records, {len(broken)} broken",
        file=sys.stderr,
    )
    print("validating with great-expectations ...", file=sys.stderr, flush=True)
    report = check_batch(records, settings)
    suite_failed = bool(records) and not report.success
    report.failures.extend(reason for _, reason in broken)
    report.success = report.success and not broken
    print(report.summary())

    if args.mlflow:
        run_name = f"quality-{args.topic}-{time.strftime('%Y%m%d-%H%M%S')}"
        run_id = log_to_mlflow(report, args.mlflow, run_name, settings.quality_experiment)
        print(f"logged to MLflow {args.mlflow}: experiment {settings.quality_experiment!r}, run {run_id}")
    if args.quarantine and not report.success:
        from ingest.producer import RecordProducer

        producer = RecordProducer(bootstrap)
        source = f"ops.quality:{args.topic}"
        letters = [
            producer.dead_letter(DeadLetter.of(source, reason, m.value or b"", session_id=_key(m)))
            for m, reason in broken
        ]
        produced = len(producer.produce(letters)) if letters else 0
        if suite_failed:
            produced += len(quarantine(producer, records, report, source))
        producer.close()
        print(f"quarantined {produced} records to {topics.DLQ}")
    return 0 if report.success else 1


def _key(message: Sampled) -> str | None:
    return message.key.decode("utf-8", "replace") if message.key else None


def register(sub) -> None:
    quality = sub.add_parser(
        "quality",
        help="validate a sample of a topic with the data-quality suite (great-expectations)",
        description="Read up to --sample records from the beginning of a topic, check the contract and the "
        "great-expectations suite (unique ids, token/logprob consistency, logprob and reward ranges, "
        "adapter version format), print a summary, and exit 1 if anything fails. Thresholds: "
        "RATCHET_QUALITY_MIN_LOGPROB, RATCHET_QUALITY_REWARD_MIN/MAX, RATCHET_QUALITY_MAX_TURNS/TOKENS.",
    )
    quality.add_argument("--topic", default="sessions.v1", help="topic to sample (default sessions.v1)")
    quality.add_argument("--sample", type=int, default=200, help="records to read at most (default 200)")
    quality.add_argument(
        "--kind",
        choices=["session", "rewarded"],
        help="record type (default: rewarded for rewarded.v1, else session)",
    )
    quality.add_argument("--bootstrap", help="Kafka bootstrap servers (default RATCHET_KAFKA_BOOTSTRAP)")
    quality.add_argument("--mlflow", metavar="URI", help="log the result to this MLflow tracking server")
    quality.add_argument(
        "--quarantine", action="store_true", help="dead-letter the records of a failing sample to dlq.v1"
    )
    quality.add_argument(
        "--idle-timeout",
        type=float,
        default=5.0,
        help="stop reading after this many idle seconds (default 5)",
    )
    quality.set_defaults(func=run)
