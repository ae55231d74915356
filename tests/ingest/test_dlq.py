"""``ratchet dlq list|replay`` against a real broker, each test on topics of its own."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import time
import uuid

import pytest

from ingest import topics
from ingest.contract import MAX_TEXT_CHARS, DeadLetter
from ingest.dlq import REPLAY_HEADER, Filters, Letter, origin_topic, plan, reason_kind
from ingest.examples import example_feedback, example_outcome, example_session
from ingest.intake import ENDPOINTS
from ingest.producer import Outgoing, RecordProducer
from ops.cli import main
from tests.conftest import free_port

# --- pure decisions -------------------------------------------------------------------------


def letter(source: str, reason: str = "bad", payload: bytes | str = b"{}", **ids) -> DeadLetter:
    return DeadLetter.of(source, reason, payload, **ids)


def test_origin_topic_of_every_stage_that_writes_dead_letters():
    session = example_session("s-1").to_json()
    feedback = example_feedback("f-1", "s-1").to_json()
    outcome = example_outcome("o-1", "s-1").to_json()
    for endpoint in ENDPOINTS:
        assert origin_topic(letter(endpoint.source)) == endpoint.topic
    assert origin_topic(letter("serving.proxy:/v1/sessions/end", payload=session)) == topics.SESSIONS
    assert origin_topic(letter("serving.proxy:idle-timeout", payload=session)) == topics.SESSIONS
    assert origin_topic(letter("ops.quality:rewarded.v1")) == topics.REWARDED
    assert origin_topic(letter("learner", "turns.0: bad")) == topics.REWARDED
    # rewards: a malformed input names its topic; a rejected signal or a failed scoring is told by its payload
    assert (
        origin_topic(letter("rewards", "outcomes.v1[3]@7: tenant: Field required", b"{}")) == topics.OUTCOMES
    )
    assert origin_topic(letter("rewards", "no session s-1 arrived", feedback)) == topics.FEEDBACK
    assert origin_topic(letter("rewards", "outcome o-1 has tenant 'beta'", outcome)) == topics.OUTCOMES
    assert (
        origin_topic(letter("rewards", "scoring revision 0 of session s-1 failed", session))
        == topics.SESSIONS
    )
    assert origin_topic(letter("rewards", "scoring failed", b"not json")) is None
    assert origin_topic(letter("someone-else")) is None
    assert origin_topic(letter("ops.quality:")) is None


def test_plan_skips_replayed_letters_refuses_cut_payloads_and_needs_a_target_for_unknown_origins():
    from ingest.dlq import NoOrigin, Replayed

    fine = Letter("dlq.v1", 0, 1, letter("ingest.api:/v1/feedback"))
    again = Letter("dlq.v1", 0, 2, letter("ingest.api:/v1/outcomes"))
    cut = Letter("dlq.v1", 0, 3, letter("ingest.api:/v1/sessions", payload="x" * (MAX_TEXT_CHARS + 1)))
    recreated = Letter("dlq.v1", 0, 4, letter("ingest.api:/v1/sessions"))
    replayed = {
        again.coordinates: Replayed(
            again.coordinates, again.record.created_at.isoformat(), "outcomes.v1", 0, 9
        ),
        # a letter once at these coordinates of an earlier dlq.v1
        recreated.coordinates: Replayed(
            recreated.coordinates, "2020-01-01T00:00:00+00:00", "sessions.v1", 0, 1
        ),
    }
    out = plan([fine, again, cut, recreated], replayed, to=None)
    assert [(s.letter, s.topic) for s in out.sends] == [(fine, topics.FEEDBACK), (recreated, topics.SESSIONS)]
    assert [x for x, _ in out.already] == [again]
    assert [x for x, _ in out.refused] == [cut]

    unknown = Letter("dlq.v1", 0, 5, letter("someone-else"))
    with pytest.raises(NoOrigin, match=r"dlq\.v1:0:5 \(source 'someone-else'\).*--to TOPIC"):
        plan([fine, unknown], {}, to=None)
    assert [s.topic for s in plan([fine, unknown], {}, to="elsewhere").sends] == ["elsewhere", "elsewhere"]


def test_filters_and_reason_kinds():
    a = letter("rewards", "no session s-1 arrived within orphan_ttl_s=600", session_id="s-1")
    b = letter(
        "ingest.api:/v1/sessions", "turns.1.assistant: 12 tokens; tenant: Field required", session_id="s-2"
    )
    assert Filters(("rewards",)).match(a) and not Filters(("rewards",)).match(b)
    assert Filters(reason_contains="ORPHAN").match(a) and not Filters(reason_contains="orphan").match(b)
    assert Filters(session_ids=("s-2", "s-9")).match(b) and not Filters(session_ids=("s-2",)).match(a)
    assert Filters(("rewards",), "orphan", ("s-1",)).match(a) and not Filters(("rewards",), "tenant").match(a)
    assert reason_kind(b.reason) == "turns.N.assistant: N tokens"
    assert reason_kind(a.reason) == "no session <id> arrived within orphan_ttl_s=N"
    mismatch = "feedback f-9 has tenant 'beta' but session s-3 has tenant 'acme'"
    assert reason_kind(mismatch) == "feedback <id> has tenant '…' but session <id> has tenant '…'"
    assert len(reason_kind("x" * 500)) == 60


# --- against the broker -----------------------------------------------------------------------


@dataclasses.dataclass
class Topics:
    dlq: str
    target: str
    log: str

    def args(self, broker: str) -> list[str]:
        return ["--bootstrap", broker, "--dlq-topic", self.dlq, "--idle-timeout", "2"]


@pytest.fixture
def own(broker) -> Topics:
    """A dead-letter topic, a target topic and a replay log of this test's own (one partition each)."""
    tag = uuid.uuid4().hex[:10]
    names = Topics(f"test-dlq-{tag}", f"test-target-{tag}", f"test-replays-{tag}")
    topics.ensure_topics(broker, [topics.TopicSpec(n, 1, 3600_000) for n in (names.dlq, names.target)])
    return names


def produce_letters(broker: str, dlq: str, letters: list[DeadLetter], junk: bytes | None = None) -> None:
    """The letters as the stages write them (``RecordProducer.dead_letter``), to ``dlq``."""
    producer = RecordProducer(broker)
    out = [dataclasses.replace(producer.dead_letter(x), topic=dlq) for x in letters]
    if junk is not None:
        out.insert(1, Outgoing(dlq, "junk", junk))
    producer.produce(out)
    producer.close()


def read_until_sentinel(broker: str, topic: str, timeout_s: float = 30.0) -> list:
    """Every record of one-partition ``topic`` before a sentinel produced now: all it holds so far."""
    producer = RecordProducer(broker)
    (sentinel,) = producer.produce([Outgoing(topic, "sentinel", b"sentinel")])
    producer.close()
    found = []
    deadline = time.monotonic() + timeout_s
    with contextlib.closing(topics.read_topic(broker, topic, poll_s=0.5)) as batches:
        while not found or found[-1].offset() < sentinel.offset:
            assert time.monotonic() < deadline, f"{topic}: sentinel at {sentinel.offset} not read"
            found += next(batches)
    return [m for m in found if m.value() != b"sentinel"]


SESSION_B = example_session("s-b").to_json()
FEEDBACK_C = example_feedback("f-c", "s-c").to_json()


def quality_letters(target: str) -> list[DeadLetter]:
    """Two letters as ``ratchet quality --topic TARGET --quarantine`` writes them, one from another stage."""
    source = f"ops.quality:{target}"
    return [
        DeadLetter.of(source, "tenant: Field required", b'{"session_id": "s-a"}', session_id="s-a"),
        DeadLetter.of(
            source,
            "turns.0.assistant: 3 tokens but 2 logprobs",
            SESSION_B,
            session_id="s-b",
            tenant="acme",
        ),
        DeadLetter.of(
            "rewards",
            "no session s-c arrived within orphan_ttl_s=600 of feedback f-c",
            FEEDBACK_C,
            session_id="s-c",
            tenant="acme",
        ),
    ]


def test_list_prints_the_letters_the_filters_choose_and_counts_them(broker, own, capsys):
    produce_letters(broker, own.dlq, quality_letters(own.target), junk=b"not a dead letter")

    assert main(["dlq", "list", *own.args(broker)]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    assert [line.split()[0] for line in lines[:3]] == ["0", "2", "3"]  # offset 1 is the junk record
    assert f"skipped 1 of the records in {own.dlq}: not dead letters" in out.err
    assert "3 of 3 dead letters" in lines[3]
    assert lines[0].split()[2:5] == [f"ops.quality:{own.target}", "s-a", "-"]
    assert (
        "rewards" in lines[2] and "s-c" in lines[2] and "acme" in lines[2] and "orphan_ttl_s=600" in lines[2]
    )
    assert [" ".join(line.split()) for line in lines[4:]] == [
        f"1 ops.quality:{own.target} tenant: Field required",
        f"1 ops.quality:{own.target} turns.N.assistant: N tokens but N logprobs",
        "1 rewards no session <id> arrived within orphan_ttl_s=N of feedback <id>",
    ]

    assert main(["dlq", "list", *own.args(broker), "--source", "rewards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines[:-2]] == ["3"] and "1 of 3 dead letters" in lines[1]

    assert main(["dlq", "list", *own.args(broker), "--reason-contains", "LOGPROBS"]) == 0
    assert [line.split()[3] for line in capsys.readouterr().out.splitlines()[:1]] == ["s-b"]

    assert main(["dlq", "list", *own.args(broker), "--session", "s-a", "--session", "s-c", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["offset"], r["session_id"], r["origin_topic"]) for r in rows] == [
        (0, "s-a", own.target),
        (3, "s-c", topics.FEEDBACK),
    ]
    assert rows[1]["payload"] == FEEDBACK_C.decode()

    assert main(["dlq", "list", *own.args(broker), "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[0] == "3" and "(showing the last 1)" in lines


def test_replay_sends_the_chosen_payloads_once_byte_for_byte(broker, own, capsys):
    letters = quality_letters(own.target)
    produce_letters(broker, own.dlq, letters)
    replay = ["dlq", "replay", *own.args(broker), "--replay-log", own.log]

    assert main([*replay, "--offset", "0", "--offset", "1", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert (
        f"would send {own.dlq}:0:0 (ops.quality:{own.target}, session s-a, 21 bytes) -> {own.target}" in out
    )
    assert f"would send {own.dlq}:0:1 " in out and "dry run: would send 2, already replayed 0" in out
    assert read_until_sentinel(broker, own.target) == []

    assert main([*replay, "--offset", "0", "--offset", "1"]) == 0
    out = capsys.readouterr().out
    assert f"sent {own.dlq}:0:0 (ops.quality:{own.target}, session s-a, 21 bytes) -> {own.target}[0]@" in out
    assert "sent 2, already replayed 0, refused 0, failed 0" in out
    sent = read_until_sentinel(broker, own.target)
    assert [(m.key(), m.value(), m.headers()) for m in sent] == [
        (b"s-a", letters[0].payload.encode(), [(REPLAY_HEADER, f"{own.dlq}:0:0".encode())]),
        (b"s-b", SESSION_B, [(REPLAY_HEADER, f"{own.dlq}:0:1".encode())]),
    ]

    # again, and the same letters chosen by session: nothing is sent twice
    assert main([*replay, "--offset", "1", "--offset", "0"]) == 0
    out = capsys.readouterr().out
    assert f"already replayed {own.dlq}:0:1 -> {own.target}[0]@{sent[1].offset()}: skipped" in out
    assert "sent 0, already replayed 2, refused 0, failed 0" in out
    assert main([*replay, "--session", "s-a", "--dry-run"]) == 0
    assert "dry run: would send 0, already replayed 1" in capsys.readouterr().out
    assert len(read_until_sentinel(broker, own.target)) == 2


def test_replay_by_filters_needs_a_target_for_letters_that_name_no_topic(broker, own, capsys):
    payload = example_outcome("o-x", "s-x").to_json()
    letters = [
        DeadLetter.of("legacy-batch-job", "outcome rejected", payload, session_id="s-x"),
        DeadLetter.of("legacy-batch-job", "other cause", b"{}", session_id="s-y"),
        DeadLetter.of(f"ops.quality:{own.target}", "big", "x" * (MAX_TEXT_CHARS + 5), session_id="s-z"),
    ]
    produce_letters(broker, own.dlq, letters)
    replay = ["dlq", "replay", *own.args(broker), "--replay-log", own.log]

    assert main([*replay, "--source", "legacy-batch-job"]) == 2
    assert "choose letters with --offset, --session or --all-matching" in capsys.readouterr().err
    assert (
        main([*replay, "--all-matching", "--source", "legacy-batch-job", "--reason-contains", "outcome"]) == 2
    )
    err = capsys.readouterr().err
    assert f"{own.dlq}:0:0 (source 'legacy-batch-job')" in err and "--to TOPIC" in err
    assert read_until_sentinel(broker, own.target) == []

    to = ["--all-matching", "--reason-contains", "outcome", "--to", own.target]
    assert main([*replay, *to]) == 0
    assert "sent 1," in capsys.readouterr().out
    assert main([*replay, "--all-matching", "--to", f"{own.target}-typo"]) == 2
    assert f"no topic {own.target}-typo" in capsys.readouterr().err

    assert main([*replay, "--session", "s-z"]) == 1
    out = capsys.readouterr().out
    assert f"refused {own.dlq}:0:2: its payload was cut to {MAX_TEXT_CHARS} characters" in out
    assert [m.value() for m in read_until_sentinel(broker, own.target)] == [payload]


def test_unknown_offsets_and_an_unreachable_broker_say_what_to_fix(broker, own, capsys):
    produce_letters(broker, own.dlq, quality_letters(own.target))
    replay = ["dlq", "replay", *own.args(broker), "--replay-log", own.log]

    assert main([*replay, "--offset", "1", "--offset", "7"]) == 2
    err = capsys.readouterr().err
    assert f"{own.dlq}: no dead letter at offset 7; dead letters sit at offsets 0..2" in err
    assert main([*replay, "--offset", "x7"]) == 2
    assert "expected an offset N, or P:N" in capsys.readouterr().err
    assert read_until_sentinel(broker, own.target) == []

    nowhere = f"127.0.0.1:{free_port()}"
    assert main(["dlq", "list", "--bootstrap", nowhere]) == 2
    err = capsys.readouterr().err
    assert f"the broker at {nowhere} did not answer" in err and "RATCHET_KAFKA_BOOTSTRAP" in err
