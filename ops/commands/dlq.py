"""ratchet dlq list|replay: review dead letters, and re-send their payloads once the cause is fixed."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from datetime import UTC

from ingest.brokers import client_config

BOOTSTRAP_SETTING = "RATCHET_KAFKA_BOOTSTRAP"


class Refused(RuntimeError):
    """Something the user can act on; the message says what."""


def _bootstrap(args: argparse.Namespace) -> str:
    from ingest.config import load
    from ingest.settings import IngestSettings

    return args.bootstrap or load(IngestSettings, "ingest").kafka_bootstrap


def _unreachable(bootstrap: str, exc: Exception) -> Refused:
    return Refused(
        f"the broker at {bootstrap} did not answer ({exc}); "
        f"is it up, and is {BOOTSTRAP_SETTING} (or --bootstrap) its address?"
    )


def _read(args: argparse.Namespace, bootstrap: str):
    """Every dead letter of the topic, read from the beginning (no consumer group is committed)."""
    from confluent_kafka import KafkaException

    from ingest.dlq import letters_of
    from ops.commands.quality import SampleError, consume_sample

    print(f"reading {args.dlq_topic} on {bootstrap} ...", file=sys.stderr, flush=True)
    try:
        records = consume_sample(bootstrap, args.dlq_topic, sys.maxsize, args.idle_timeout)
    except SampleError as exc:
        raise Refused(
            f"{exc}: is {BOOTSTRAP_SETTING} (or --bootstrap) the right broker, --dlq-topic the topic?"
        ) from None
    except KafkaException as exc:
        raise _unreachable(bootstrap, exc) from None
    letters, unreadable = letters_of(args.dlq_topic, records)
    if unreadable:
        print(
            f"skipped {len(unreadable)} of the records in {args.dlq_topic}: not dead letters", file=sys.stderr
        )
    return letters, unreadable


def _filters(args: argparse.Namespace):
    from ingest.dlq import Filters

    return Filters(tuple(args.source or ()), args.reason_contains, tuple(args.session or ()))


def _cut(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def list_letters(args: argparse.Namespace) -> int:
    from ingest.dlq import origin_topic, summary

    letters, _ = _read(args, _bootstrap(args))
    chosen = [x for x in letters if _filters(args).match(x.record)]
    shown = chosen[-args.limit :] if args.limit else chosen
    if args.json:
        for x in shown:
            row = {"partition": x.partition, "offset": x.offset, "origin_topic": origin_topic(x.record)}
            print(json.dumps(row | x.record.model_dump(mode="json"), sort_keys=True))
    else:
        rows = [
            (
                f"{x.partition}:{x.offset}" if x.partition else str(x.offset),
                x.record.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                _cut(x.record.source, 64),
                _cut(x.record.session_id or "-", 40),
                _cut(x.record.tenant or "-", 24),
                _cut(x.record.reason, args.width),
            )
            for x in shown
        ]
        widths = [max((len(row[i]) for row in rows), default=0) for i in range(5)]
        for place, *middle, reason in rows:
            columns = [place.rjust(widths[0]), *(c.ljust(w) for c, w in zip(middle, widths[1:], strict=True))]
            print("  ".join([*columns, reason]))
    out = sys.stderr if args.json else sys.stdout
    print(f"{len(chosen)} of {len(letters)} dead letters in {args.dlq_topic} match", file=out)
    if len(shown) < len(chosen):
        print(f"(showing the last {len(shown)})", file=out)
    for n, source, kind in summary(chosen, args.width):
        print(f"{n:>6}  {source}  {kind}", file=out)
    return 0


def _offsets(values: list[str]) -> list[tuple[int, int]]:
    """``N`` (partition 0) or ``P:N`` each."""
    out = []
    for value in values:
        partition, _, offset = value.rpartition(":")
        try:
            out.append((int(partition or 0), int(offset)))
        except ValueError:
            raise Refused(f"--offset {value!r}: expected an offset N, or P:N for partition P") from None
    return out


def replay_letters(args: argparse.Namespace) -> int:
    from confluent_kafka import KafkaException

    from ingest.dlq import REPLAYS, NoOrigin, at_offsets, plan, read_replayed, replay
    from ingest.producer import BrokerUnavailable

    if not (args.offset or args.session or args.all_matching):
        raise Refused("choose letters with --offset, --session or --all-matching")
    bootstrap, log_topic = _bootstrap(args), args.replay_log or REPLAYS
    letters, unreadable = _read(args, bootstrap)
    try:
        chosen = at_offsets(letters, unreadable, _offsets(args.offset)) if args.offset else letters
    except LookupError as exc:
        raise Refused(f"{args.dlq_topic}: {exc}") from None
    chosen = [x for x in chosen if _filters(args).match(x.record)]
    try:
        existing = _topics(bootstrap)
        replicas = max(1, len(existing[args.dlq_topic].partitions[0].replicas))  # the log's, if created now
        actions = plan(chosen, read_replayed(bootstrap, log_topic, replicas), args.to)
    except NoOrigin as exc:
        raise Refused(str(exc)) from None
    except (BrokerUnavailable, KafkaException) as exc:
        raise _unreachable(bootstrap, exc) from None
    missing = sorted({s.topic for s in actions.sends} - set(existing))
    if missing:
        raise Refused(f"no topic {', '.join(missing)} on {bootstrap}: nothing was sent")
    if not chosen:
        print("no dead letter matches the choice")
    for x, before in actions.already:
        print(f"already replayed {x.coordinates} -> {before.where}: skipped")
    for x, why in actions.refused:
        print(f"refused {x.coordinates}: {why}")
    counts = f"already replayed {len(actions.already)}, refused {len(actions.refused)}"
    if args.dry_run:
        for send in actions.sends:
            print(f"would send {_describe(send)} -> {send.topic}")
        print(f"dry run: would send {len(actions.sends)}, {counts}; nothing was sent")
        return 1 if actions.refused else 0
    try:
        done, failed = replay(bootstrap, actions.sends, log_topic)
    except BrokerUnavailable as exc:
        raise Refused(str(exc)) from None
    for send, r in done:
        print(f"sent {_describe(send)} -> {r.where}")
    for send, why in failed:
        print(f"failed {_describe(send)} -> {send.topic}: {why}")
    print(f"sent {len(done)}, {counts}, failed {len(failed)}")
    return 1 if actions.refused or failed else 0


def _describe(send) -> str:
    d = send.letter.record
    return f"{send.letter.coordinates} ({d.source}, session {d.session_id or '-'}, {len(d.payload.encode())} bytes)"


def _topics(bootstrap: str) -> dict:
    from confluent_kafka.admin import AdminClient

    return AdminClient(client_config(bootstrap)).list_topics(timeout=10).topics


def _guarded(func):
    def run(args: argparse.Namespace) -> int:
        try:
            return func(args)
        except Refused as exc:
            print(f"ratchet dlq {args.action}: {exc}", file=sys.stderr)
            return 2

    return run


def _add_common(p: argparse.ArgumentParser) -> None:
    from ingest import topics

    p.add_argument("--source", action="append", help="only letters from this source (repeatable)")
    p.add_argument("--reason-contains", metavar="TEXT", help="only letters whose reason contains TEXT")
    p.add_argument(
        "--session", action="append", metavar="ID", help="only letters of this session (repeatable)"
    )
    p.add_argument("--bootstrap", help=f"Kafka bootstrap servers (default {BOOTSTRAP_SETTING})")
    p.add_argument("--dlq-topic", default=topics.DLQ, help=f"the dead-letter topic (default {topics.DLQ})")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=3.0,
        help="the dead-letter topic is read until nothing arrives for this many seconds (default 3)",
    )


def _parser(actions, name: str, help: str, description: str, examples: str) -> argparse.ArgumentParser:
    return actions.add_parser(
        name,
        help=help,
        description=textwrap.fill(" ".join(description.split()), 88),
        epilog=textwrap.dedent(examples),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )


def register(sub) -> None:
    dlq = sub.add_parser(
        "dlq",
        help="dead letters: list them, replay their payloads once the cause is fixed",
        description="Records that a stage could not process (contract errors, failed scoring, data-quality "
        "quarantine, orphaned signals) sit in dlq.v1 with their reason and their payload. `list` shows "
        "them; `replay` re-sends payloads to the topic they came from, once each.",
    )
    actions = dlq.add_subparsers(dest="action", required=True, metavar="ACTION")

    ls = _parser(
        actions,
        "list",
        "show the dead letters, with a count by source and reason",
        """Read the dead-letter topic from the beginning (a throwaway reader: no consumer group offset
        is committed) and print one line per letter: offset, time, source, session, tenant and reason;
        then how many of the matching letters there are of each source and reason.""",
        """\
        examples:
          ratchet dlq list --source rewards --reason-contains orphan --limit 20
          ratchet dlq list --session s-42 --json | jq -r .payload
        """,
    )
    _add_common(ls)
    ls.add_argument("--json", action="store_true", help="one JSON object per letter (payload included)")
    ls.add_argument("--limit", type=int, default=0, help="show only the last N matching letters")
    ls.add_argument("--width", type=int, default=80, help="cut reasons to this many characters (default 80)")
    ls.set_defaults(func=_guarded(list_letters))

    rp = _parser(
        actions,
        "replay",
        "re-send dead letters' payloads to the topic they came from, once each",
        """Re-send the payload of each chosen dead letter as it was kept, keyed by its session id, to
        the topic it came from (worked out from the letter's source; --to names it for letters that
        do not tell), with the header ratchet.replay-of: <topic>:<partition>:<offset>. Once the broker
        acknowledges it, the replay is recorded in the replay log topic; a letter found there is
        skipped as already replayed. The payload is not checked: the stage downstream decides, and
        one that fails again becomes a new dead letter. A payload cut to the contract's text limit
        when it was dead-lettered is refused. Choose letters with --offset, --session or
        --all-matching; --source and --reason-contains narrow the choice. Exit 1 if a letter was
        refused or not acknowledged, 2 if nothing could be done.""",
        """\
        examples:
          ratchet dlq replay --offset 17 --offset 18 --dry-run
          ratchet dlq replay --session s-42
          ratchet dlq replay --all-matching --source ingest.api:/v1/sessions --reason-contains tenant
          ratchet dlq replay --offset 9 --to sessions.v1   # a letter whose source names no topic
        """,
    )
    chosen = rp.add_mutually_exclusive_group()
    chosen.add_argument(
        "--offset", action="append", metavar="N", help="the letter at offset N (or P:N) (repeatable)"
    )
    chosen.add_argument(
        "--all-matching", action="store_true", help="every letter the filters match (all, with none)"
    )
    _add_common(rp)
    rp.add_argument("--to", metavar="TOPIC", help="send every chosen payload to TOPIC instead of its origin")
    rp.add_argument("--replay-log", help="the topic that records replays (default dlq-replays.v1)")
    rp.add_argument(
        "--dry-run",
        action="store_true",
        help="show what would be sent where, and what was replayed already; send nothing",
    )
    rp.set_defaults(func=_guarded(replay_letters))
