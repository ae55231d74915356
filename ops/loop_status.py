"""What `ratchet status` shows of the loop, stage by stage, as plain dicts.

Each function reads one stage and returns a JSON-ready dict (numbers, strings,
lists), so ``ratchet status --json`` prints them as they are and an exporter can
turn them into gauges. Whatever cannot be read is ``{"unknown": reason}`` in its
place, never an exception; every network probe has a short timeout.

- :func:`end_offsets`: each partition's true end. Tansu answers ListOffsets
  (latest) with the last batch's base offset + 1, not the end, so the end is
  found by reading: from ``max(reported - 1, floor, 0)`` until the partition's
  end-of-partition event and one more poll bring nothing new.
- :func:`lag`: end − position per partition, and the total (pure).
- :func:`group_positions` / :func:`learner_positions`: the rewards worker's
  committed offsets, the learner's checkpointed ones.
- :func:`rates`: records per minute over the last minutes, from record
  timestamps read backwards from the end in chunks (Tansu answers
  OffsetsForTimes with offset 0 whatever the time).
- :func:`learner_status`, :func:`gate_status`, :func:`replica_status`: the
  learner's checkpoint, versions and ``/health``; the gate's evaluation and its
  progress; the version each replica serves, with warnings where it disagrees
  with the decision log or the proxy's route.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import httpx

from ingest import topics
from ingest.brokers import client_config
from ingest.config import ConfigError
from learner.store import BASE

PROBE_TIMEOUT_S = 1.0  # one HTTP probe, one broker metadata call
READ_DEADLINE_S = 3.0  # reading a set of partitions to their end
IDLE_POLL_S = 0.3  # a poll this long that brings nothing new ends a read
RATE_WINDOW_S = 300.0
RATE_CHUNK = 500  # records read per partition per step backwards
RATE_MAX_RECORDS = 20_000  # per partition; beyond it the rate is a lower bound ("truncated")
CKPT_RE = re.compile(r"^ckpt-[0-9]{8}$")  # learner/checkpoint.py's folder names

Partition = tuple[str, int]


def _key(tp: Partition) -> str:
    return f"{tp[0]}[{tp[1]}]"


def broker_unreachable(bootstrap: str) -> str | None:
    """Why the broker cannot be asked anything (None: it accepts connections)."""
    from ops.stack import port_open

    host, _, port = bootstrap.split(",")[0].rpartition(":")
    if not port_open(host, int(port), timeout=PROBE_TIMEOUT_S):
        return f"broker not reachable at {bootstrap}"
    return None


def _consumer(bootstrap: str, **config: Any):
    from confluent_kafka import Consumer

    return Consumer(
        client_config(
            bootstrap,
            **{
                "group.id": f"ratchet-status-{time.time_ns()}",  # reads only: never joins, never commits
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "socket.timeout.ms": int(PROBE_TIMEOUT_S * 1000) * 2,
                "log_level": 3,
                **config,
            },
        )
    )


def partitions_of(consumer, names: list[str]) -> dict[str, list[int]] | dict[str, str]:
    """Partitions per topic; a topic the broker does not know maps to its error text."""
    meta = consumer.list_topics(timeout=PROBE_TIMEOUT_S * 2)
    out: dict = {}
    for name in names:
        t = meta.topics.get(name)
        out[name] = (
            sorted(t.partitions) if t is not None and t.error is None and t.partitions else "no such topic"
        )
    return out


def end_offsets(
    bootstrap: str, names: list[str], floors: dict[Partition, int] | None = None
) -> dict[Partition, dict[str, Any]]:
    """Per partition of ``names``: ``end`` (the true end), ``reported_end`` (ListOffsets latest),
    ``first`` (the oldest offset held); ``end`` is None when the read did not finish in time.

    ``floors`` are positions known to exist (a committed offset): the read starts at
    ``max(reported_end - 1, floor, 0)``, so it costs at most the last batch.
    """
    from confluent_kafka import KafkaError, TopicPartition

    consumer = _consumer(bootstrap)
    try:
        found = partitions_of(consumer, names)
        tps = [(t, p) for t, ps in found.items() if isinstance(ps, list) for p in ps]
        out: dict[Partition, dict[str, Any]] = {}
        starts: dict[Partition, int] = {}
        for tp in tps:
            first, reported = consumer.get_watermark_offsets(TopicPartition(*tp), timeout=PROBE_TIMEOUT_S)
            starts[tp] = max(reported - 1, (floors or {}).get(tp, 0), first, 0)
            out[tp] = {"end": None, "reported_end": reported, "first": first}
        consumer.assign([TopicPartition(t, p, starts[(t, p)]) for t, p in tps])
        last: dict[Partition, int] = {}
        at_eof: set[Partition] = set()
        deadline = time.monotonic() + READ_DEADLINE_S
        while time.monotonic() < deadline:
            news = False
            for msg in consumer.consume(num_messages=1000, timeout=IDLE_POLL_S):
                tp = (msg.topic(), msg.partition())
                if msg.error() is None:
                    last[tp] = max(last.get(tp, -1), msg.offset())
                    at_eof.discard(tp)
                    news = True
                elif msg.error().code() == KafkaError._PARTITION_EOF:
                    at_eof.add(tp)
            if not news and len(at_eof) == len(tps):
                break
        for tp in at_eof:
            out[tp]["end"] = last[tp] + 1 if tp in last else starts[tp]
        return out
    finally:
        consumer.close()


def lag(ends: dict[Partition, dict[str, Any]], positions: dict[Partition, int | None]) -> dict[str, Any]:
    """Per partition: end, position (next offset to read), lag; and the total. A partition with no
    position counts from its first offset (the stages start at the earliest)."""
    rows, total, unknown = [], 0, []
    for tp in sorted(ends):
        end, first = ends[tp]["end"], ends[tp]["first"]
        position = positions.get(tp)
        row = {"topic": tp[0], "partition": tp[1], "end": end, "reported_end": ends[tp]["reported_end"]}
        row["position"] = position
        if end is None:
            row["lag"], row["unknown"] = None, f"end not found within {READ_DEADLINE_S}s"
            unknown.append(_key(tp))
        else:
            row["lag"] = max(0, end - (position if position is not None else max(first, 0)))
            total += row["lag"]
        rows.append(row)
    return {"partitions": rows, "total": None if unknown else total, "unknown_partitions": unknown}


def group_positions(bootstrap: str, group: str, names: list[str]) -> dict[Partition, int | None]:
    """The consumer group's committed offsets on every partition of ``names`` (None: nothing committed)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    consumer = _consumer(bootstrap)
    try:
        found = partitions_of(consumer, names)
    finally:
        consumer.close()
    tps = [TopicPartition(t, p) for t, ps in found.items() if isinstance(ps, list) for p in ps]
    if not tps:
        return {}
    admin = AdminClient(client_config(bootstrap, log_level=3))
    request = [ConsumerGroupTopicPartitions(group, tps)]
    futures = admin.list_consumer_group_offsets(request, request_timeout=PROBE_TIMEOUT_S * 2)
    answer = futures[group].result(timeout=PROBE_TIMEOUT_S * 2)
    return {(tp.topic, tp.partition): tp.offset if tp.offset >= 0 else None for tp in answer.topic_partitions}


def latest_learner_state(learner_state_dir: Path) -> tuple[dict, float] | None:
    """The newest checkpoint's state.json (learner/checkpoint.py) and when it was written; None: none yet."""
    root = Path(learner_state_dir) / "checkpoints"
    names = sorted(p.name for p in root.iterdir() if CKPT_RE.match(p.name)) if root.exists() else []
    if not names:
        return None
    path = root / names[-1] / "state.json"
    return json.loads(path.read_text()), path.stat().st_mtime


def learner_positions(learner_state_dir: Path, topic: str = topics.REWARDED) -> dict[Partition, int]:
    """The learner's next offsets on ``topic``, from its newest checkpoint (empty before the first)."""
    found = latest_learner_state(learner_state_dir)
    return {(topic, int(p)): int(o) for p, o in (found[0]["offsets"] if found else {}).items()}


def rates(
    bootstrap: str,
    ends: dict[Partition, dict[str, Any]],
    names: list[str],
    window_s: float = RATE_WINDOW_S,
    now: float | None = None,
) -> dict[str, dict[str, Any]]:
    """Records per minute on each topic of ``names`` over the ``window_s`` before ``now``, from the
    records' own timestamps, read backwards from each partition's true end (markers not counted)."""
    from confluent_kafka import KafkaError, TopicPartition

    now = time.time() if now is None else now
    since_ms = int((now - window_s) * 1000)
    counts = dict.fromkeys(names, 0)
    truncated, unknown = set(), set()
    todo = {}  # partition -> (chunk start, chunk end)
    for tp, e in ends.items():
        if tp[0] not in counts:
            continue
        if e["end"] is None:
            unknown.add(tp[0])
        elif e["end"] > max(e["first"], 0):
            todo[tp] = (max(e["end"] - RATE_CHUNK, e["first"], 0), e["end"])
    consumer = _consumer(bootstrap)
    deadline = time.monotonic() + READ_DEADLINE_S
    try:
        while todo and time.monotonic() < deadline:
            consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in todo.items()])
            oldest: dict[Partition, int] = {}
            done: set[Partition] = set()
            while len(done) < len(todo) and time.monotonic() < deadline:
                for msg in consumer.consume(num_messages=1000, timeout=IDLE_POLL_S):
                    tp = (msg.topic(), msg.partition())
                    if tp not in todo or tp in done:
                        continue
                    if msg.error() is not None:
                        if msg.error().code() == KafkaError._PARTITION_EOF:
                            done.add(tp)
                        continue
                    if msg.offset() >= todo[tp][1]:
                        done.add(tp)
                        continue
                    ts = msg.timestamp()[1]
                    oldest[tp] = min(oldest.get(tp, ts), ts)
                    marker = topics.is_marker(msg)
                    if ts >= since_ms and not marker:
                        counts[tp[0]] += 1
                    if msg.offset() == todo[tp][1] - 1:
                        done.add(tp)
            if len(done) < len(todo):
                unknown.update(tp[0] for tp in todo if tp not in done)
                break
            step = {}
            for tp, (start, _) in todo.items():
                first = max(ends[tp]["first"], 0)
                if oldest.get(tp, since_ms) < since_ms or start <= first:
                    continue  # reached the window's start, or the partition's
                if ends[tp]["end"] - start >= RATE_MAX_RECORDS:
                    truncated.add(tp[0])
                    continue
                step[tp] = (max(start - RATE_CHUNK, first), start)
            todo = step
    finally:
        consumer.close()
    out = {}
    for name in names:
        if name in unknown:
            out[name] = {"unknown": f"not read to the window's start within {READ_DEADLINE_S}s"}
            continue
        out[name] = {
            "per_minute": round(counts[name] * 60.0 / window_s, 2),
            "records": counts[name],
            "window_s": window_s,
            "truncated": name in truncated,  # True: more records than read, the rate is a lower bound
        }
    return out


def health(url: str) -> dict[str, Any]:
    """A stage's ``/health`` JSON (ingest/health.py; 503 answers it too, with status "stale")."""
    try:
        resp = httpx.get(url, timeout=PROBE_TIMEOUT_S)
        body = resp.json()
    except (httpx.HTTPError, ValueError) as exc:
        return {"unknown": f"no answer from {url}: {type(exc).__name__}"}
    return body if isinstance(body, dict) else {"unknown": f"{url} answered {body!r}"}


def learner_status(
    learner_state_dir: Path, adapter_store_dir: Path, health_url: str, now: float | None = None
) -> dict[str, Any]:
    """The learner's newest checkpoint (updates, head, offsets, when), the versions it published,
    the time since its last update, and its ``/health``."""
    now = time.time() if now is None else now
    out: dict[str, Any] = {"health": health(health_url)}
    found = latest_learner_state(learner_state_dir)
    if found is None:
        out["checkpoint"] = {"unknown": f"no checkpoint in {Path(learner_state_dir) / 'checkpoints'}"}
    else:
        state, written = found
        last_ms = (state.get("window") or {}).get("last", {}).get("timestamp_ms")
        last_update = last_ms / 1000 if last_ms else written
        out["checkpoint"] = {
            "checkpoint": state["checkpoint"],
            "updates": state["updates"],
            "records": state["records"],
            "head": state.get("head") or "unknown",
            "offsets": state["offsets"],
            "written_at": round(written, 3),
            "last_update_at": round(last_update, 3),
        }
        out["staleness_s"] = round(now - last_update, 1)
    versions_dir = Path(adapter_store_dir) / "versions"
    if not versions_dir.exists():
        out["published"] = {"unknown": f"no adapter store at {adapter_store_dir}"}
    else:
        from learner.store import AdapterStore

        store = AdapterStore(adapter_store_dir)
        versions, latest = store.versions(), store.latest()
        out["published"] = {
            "versions": versions,
            "latest": latest.version if latest else None,
            "latest_at": latest.manifest.created_at if latest else None,
        }
    return out


def gate_progress(results_dir: Path, version: str, total_tasks: int | None) -> dict[str, Any]:
    """How many of its tasks the candidate ``version`` has results for (gating/harness.py caches one
    line per task in ``<results>/candidate/<version>-<hash>/<suite>.jsonl``)."""
    by_suite: dict[str, int] = {}
    for path in sorted((Path(results_dir) / "candidate").glob(f"{version}-*/*.jsonl")):
        lines = [line for line in path.read_text().splitlines() if line.strip()]
        by_suite[path.stem.split("@")[0]] = by_suite.get(path.stem.split("@")[0], 0) + len(lines)
    done = sum(by_suite.values())
    return {"tasks_done": done, "tasks_total": total_tasks, "by_suite": by_suite}


def candidate_tasks(gate_dir: Path) -> int | None:
    """Tasks a candidate runs (the non-drift suites, as the gate settings limit them); None if unreadable."""
    from gating.settings import load_settings

    try:
        s = load_settings(gate_dir=Path(gate_dir))
        suites = [s.load_suite(n) for n in s.suites]
    except (ConfigError, OSError, ValueError, KeyError):  # an unreadable config only hides the total
        return None
    return sum(len(x.tasks) for x in suites if not x.is_drift)


def gate_status(gate_dir: Path, health_url: str, decisions: list[dict]) -> dict[str, Any]:
    """The candidate under evaluation and its progress (from the gate's ``/health`` and its cached
    results), else the last decision."""
    out: dict[str, Any] = {"health": health(health_url)}
    evaluating = out["health"].get("evaluating")
    if evaluating:
        results = Path(gate_dir) / "results"
        out["evaluating"] = {
            "version": evaluating,
            **gate_progress(results, evaluating, candidate_tasks(gate_dir)),
        }
    elif "unknown" in out["health"]:
        out["evaluating"] = {"unknown": "the gate's /health does not answer"}
    else:
        out["evaluating"] = None
    out["last_decision"] = (
        {k: decisions[-1].get(k) for k in ("version", "action", "decision", "at")}
        if decisions
        else {"unknown": "no decision in the log yet"}
    )
    return out


def logged_champion(decisions: list[dict]) -> dict[str, Any]:
    """The champion the decision log leads to (its last entry's state; None there is the base model),
    and the last promotion, approval or rollback."""
    if not decisions:
        return {"version": BASE, "by": "no decision logged"}
    moved = [
        d for d in decisions if d.get("decision") == "promote" or d.get("action") in ("rollback", "reject")
    ]
    by = moved[-1] if moved else decisions[-1]
    state = decisions[-1].get("state") or {}
    out = {
        "version": state.get("champion") or BASE,
        "by": f"{by.get('action')} {by.get('version')} ({by.get('decision')}) at {by.get('at')}",
    }
    if state.get("canary"):  # on trial: the version served before it keeps the alias meanwhile
        began = next(
            (
                d
                for d in reversed(decisions)
                if d.get("version") == state["canary"] and d.get("decision") == "promote"
            ),
            {},
        )
        out |= {"canary": state["canary"], "incumbent": began.get("champion_before") or BASE}
    return out


def replica_status(report: dict, decisions: list[dict], routed: str | None) -> dict[str, Any]:
    """Per replica the policy version it serves (the routes' alias, where the replica has it routed),
    with warnings where it differs from the decision log's champion or the proxy's route (pure)."""
    if not report:
        return {"replicas": {"unknown": "no <state>/serving/status.json: the serving controller has not run"}}
    alias = (report.get("alias") or {}).get("policy")
    champion = logged_champion(decisions)
    replicas, warnings = [], []
    for r in report.get("replicas", []):
        if not r.get("healthy"):
            serves = None
        elif alias is None:
            serves = BASE
        else:
            serves = alias if alias in r.get("routed", []) else None
        replicas.append(
            {
                "url": r.get("url"),
                "healthy": r.get("healthy"),
                "serves": serves,
                "loaded": r.get("loaded", []),
                "routed": r.get("routed", []),
                "error": r.get("error"),
            }
        )
        if serves is None:
            why = (r.get("error") or "unhealthy") if not r.get("healthy") else f"{alias} is not routed there"
            warnings.append(f"replica {r.get('url')} serves no policy version ({why})")
            continue
        if serves != champion["version"] and serves != champion.get("incumbent"):
            warnings.append(
                f"replica {r.get('url')} serves {serves} but the decision log's champion is "
                f"{champion['version']} (last: {champion['by']})"
            )
        if routed is not None and serves != routed:
            warnings.append(f"replica {r.get('url')} serves {serves} but the proxy routes policy to {routed}")
    return {
        "replicas": replicas,
        "controller_champion": report.get("champion"),
        "canary": (report.get("canary") or {}).get("policy"),
        "logged_champion": champion,
        "updated_at": report.get("updated_at"),
        "problems": report.get("problems", []),
        "warnings": warnings,
    }


def kafka_status(bootstrap: str, rewards_group: str, learner_state_dir: Path) -> dict[str, Any]:
    """``lag`` (the rewards worker's group on its inputs, the learner on rewarded.v1) and ``rates``
    (sessions in and rewarded out per minute), from one read of the topics' true ends."""
    why = broker_unreachable(bootstrap)
    if why:
        return {"lag": {"unknown": why}, "rates": {"unknown": why}}
    inputs = [topics.SESSIONS, topics.FEEDBACK, topics.OUTCOMES]
    from confluent_kafka import KafkaException

    try:
        rewards_at = group_positions(bootstrap, rewards_group, inputs)
    except KafkaException as exc:
        rewards_at, rewards_error = {}, f"committed offsets of {rewards_group}: {exc}"
    else:
        rewards_error = None
    try:
        learner_at, learner_error = learner_positions(learner_state_dir), None
    except (OSError, ValueError, KeyError) as exc:
        learner_at, learner_error = {}, f"learner checkpoint unreadable: {exc}"
    floors = {tp: o for tp, o in {**rewards_at, **learner_at}.items() if o is not None}
    try:
        ends = end_offsets(bootstrap, [*inputs, topics.REWARDED], floors)
    except KafkaException as exc:
        return {"lag": {"unknown": f"end offsets: {exc}"}, "rates": {"unknown": f"end offsets: {exc}"}}
    rewards_ends = {tp: e for tp, e in ends.items() if tp[0] in inputs}
    learner_ends = {tp: e for tp, e in ends.items() if tp[0] == topics.REWARDED}
    if learner_error is None and not learner_at:
        learner_error = "no learner checkpoint yet"
    return {
        "lag": {
            "rewards": {"unknown": rewards_error}
            if rewards_error
            else {"group": rewards_group, **lag(rewards_ends, rewards_at)},
            "learner": {"unknown": learner_error}
            if learner_error
            else {"source": "checkpoint", **lag(learner_ends, learner_at)},
        },
        "rates": rates(bootstrap, ends, [topics.SESSIONS, topics.REWARDED]),
    }


def loop_status(stack, ps, decisions: list[dict], routed: str | None, report: dict) -> dict[str, Any]:
    """``lag``, ``rates``, ``learner``, ``gate``, ``replicas`` and ``warnings`` of the local loop
    (``stack``: ops.stack.StackSettings; ``ps``: ops.pipeline.PipelineSettings; paths as stage_env's)."""
    from rewards.worker_settings import load_stream_settings

    state = Path(stack.state_dir)
    kafka = kafka_status(stack.kafka_bootstrap, load_stream_settings().rewards_group_id, state / "learner")
    learner = learner_status(
        state / "learner", state / "adapters", f"http://{stack.host}:{ps.learner_health_port}/health"
    )
    gate = gate_status(state / "gate", f"http://{stack.host}:{ps.gate_health_port}/health", decisions)
    replicas = replica_status(report, decisions, routed)
    warnings = list(replicas.pop("warnings", []))
    if "unknown" not in learner["health"] and learner["health"].get("status") != "ok":
        warnings.append(f"the learner's /health says {learner['health'].get('status')}")
    if "unknown" not in gate["health"] and gate["health"].get("status") != "ok":
        warnings.append(f"the gate's /health says {gate['health'].get('status')}")
    return {**kafka, "learner": learner, "gate": gate, "replicas": replicas, "warnings": warnings}
