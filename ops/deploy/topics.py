"""Create Ratchet's topics on an existing Kafka cluster, and check their layout.

    python -m ops.deploy.topics --partitions 12 --replication-factor 3
    python -m ops.deploy.topics --check

The cluster is RATCHET_KAFKA_BOOTSTRAP (or ``kafka_bootstrap`` in the RATCHET_CONFIG
file). Missing topics are created with ``ingest.topics.topic_specs``; existing ones are
left alone. Exit 1 when a topic is missing or the keyed topics do not share one
partition count (a session's records must land on the same partition number in each).
"""

from __future__ import annotations

import argparse
import sys

from ingest import topics
from ingest.brokers import client_config

KEYED = (topics.SESSIONS, topics.FEEDBACK, topics.OUTCOMES, topics.REWARDED)
ALL = (*KEYED, topics.DLQ)


def layout_problems(partitions: dict[str, int]) -> list[str]:
    """What is wrong with topics of these partition counts, by name; empty when nothing is."""
    problems = [f"topic {name} is missing" for name in ALL if name not in partitions]
    counts = {name: partitions[name] for name in KEYED if name in partitions}
    if len(set(counts.values())) > 1:
        listed = ", ".join(f"{name} has {n}" for name, n in counts.items())
        problems.append(f"the keyed topics must share one partition count: {listed}")
    return problems


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ops.deploy.topics", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", metavar="HOST:PORT,...", help="default RATCHET_KAFKA_BOOTSTRAP")
    parser.add_argument(
        "--partitions",
        type=int,
        default=12,
        help="partitions of sessions.v1, feedback.v1, outcomes.v1 and rewarded.v1: the most reward "
        "workers that can share the work (default 12; dlq.v1 has 1)",
    )
    parser.add_argument("--replication-factor", type=int, default=3, help="default 3")
    parser.add_argument("--check", action="store_true", help="only check the topics, create nothing")
    return parser


def main(argv: list[str] | None = None) -> int:
    from confluent_kafka.admin import AdminClient

    from ingest.config import load
    from ingest.settings import IngestSettings

    args = build_parser().parse_args(argv)
    bootstrap = args.bootstrap or load(IngestSettings, "ingest").kafka_bootstrap
    if not args.check:
        created = topics.ensure_topics(
            bootstrap, topics.topic_specs(args.partitions, args.replication_factor)
        )
        print(f"created: {', '.join(created) or 'none (all exist)'}")
    listed = AdminClient(client_config(bootstrap)).list_topics(timeout=30).topics
    partitions = {name: len(listed[name].partitions) for name in ALL if name in listed}
    for name in ALL:
        print(f"{name}: {partitions.get(name, 'missing')} partitions")
    problems = layout_problems(partitions)
    for problem in problems:
        print(f"!! {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
