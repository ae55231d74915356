import dataclasses
import json
import threading
from types import SimpleNamespace

import httpx
import numpy as np
import pytest

from gating.evaluation import Evaluator, phase_seconds
from gating.harness import Harness, HarnessError, Policy, TaskResult
from gating.rule import TARGET
from gating.sequential import rounds, sequential_target, task_order
from gating.settings import GateSettings
from gating.suites import load_suite
from gating.tasks import FORMAT_TOOLS, tool_call
from ops.stack import free_port
from tests.gating.conftest import read_jsonl


def test_an_unreachable_vllm_stops_the_run_instead_of_failing_tasks(tmp_path):
    harness = Harness(f"http://127.0.0.1:{free_port()}", "m", tmp_path)
    with pytest.raises(HarnessError, match="unreachable"):
        harness.run(Policy("base", "m"), load_suite("format").limited(2))
    assert not list(tmp_path.rglob("*.jsonl"))


@pytest.mark.stack
def test_results_are_kept_per_task_and_a_run_resumes_where_it_stopped(vllm_url, served_model, tmp_path):
    harness = Harness(vllm_url, served_model, tmp_path, concurrency=4)
    base = Policy("base", served_model)
    suite = load_suite("general")
    first = harness.run(base, suite.limited(2))
    path = harness.results_path(base, suite)
    # one line per task, appended as each finishes (in any order)
    assert sorted(r["task_id"] for r in read_jsonl(path)) == sorted(t.task_id for t in suite.tasks[:2])
    more = harness.run(base, suite.limited(3))
    assert [r.to_json() for r in more[:2]] == [r.to_json() for r in first]
    assert len(read_jsonl(path)) == 3 and all(len(r.texts) == 1 for r in more)


@pytest.mark.stack
def test_a_task_past_its_time_limit_is_retried_then_stops_the_run_uncached(vllm_url, served_model, tmp_path):
    suite = load_suite("target").limited(2)
    suite = dataclasses.replace(suite, config=dataclasses.replace(suite.config, time_limit_s=0.001))
    harness = Harness(vllm_url, served_model, tmp_path, timeout_retries=1)
    sent: list[httpx.Request] = []
    harness.http.event_hooks = {"request": [sent.append], "response": []}
    base = Policy("base", served_model, role="champion")
    with pytest.raises(HarnessError, match=r"ran past its 0.001s time limit 2 times.*RATCHET_CONCURRENCY"):
        harness.run(base, suite)
    bodies = [json.loads(r.content) for r in sent if not prefill(r)]  # its prefill timed out too
    first = bodies[0]["messages"]
    assert sum(b["messages"] == first for b in bodies) == 2  # the same task, sent twice
    assert not harness.results_path(base, suite).exists()  # a timeout is not the policy's failure


# --- retries and cache paths, without vLLM (an httpx.MockTransport answers) --------------------


def format_answer(task, request: httpx.Request) -> httpx.Response:
    """What vLLM would answer with the right tool call, once per requested sample."""
    tool = task.expected["tool"]
    text = tool_call(tool, **{name: "x" for name in FORMAT_TOOLS[tool]})
    choices = [{"index": i, "message": {"content": text}} for i in range(json.loads(request.content)["n"])]
    return httpx.Response(200, json={"choices": choices, "usage": {"completion_tokens": 9}})


def mock_harness(tmp_path, handler) -> Harness:
    return Harness("http://vllm.test", "m", tmp_path, transport=httpx.MockTransport(handler))


def timeout(request: httpx.Request):
    raise httpx.ReadTimeout("timed out", request=request)


def prefill(request: httpx.Request) -> bool:
    """Whether ``request`` only warms vLLM's prefix cache (one token) rather than runs a task."""
    return json.loads(request.content)["max_tokens"] == 1


def test_retry_logic_a_request_that_times_out_twice_is_retried_and_scored(tmp_path):
    suite = load_suite("format").limited(1)
    (task,) = suite.tasks
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if prefill(request):
            return format_answer(task, request)
        sent.append(request)
        return timeout(request) if len(sent) <= 2 else format_answer(task, request)

    harness = mock_harness(tmp_path, handler)
    policy = Policy("base", "m", role="champion")
    (result,) = harness.run(policy, suite)
    assert len(sent) == 3
    assert result.passed == [True] * suite.config.samples and result.error is None
    assert [r["task_id"] for r in read_jsonl(harness.results_path(policy, suite))] == [task.task_id]


def test_retry_logic_a_request_that_always_times_out_stops_the_run_and_is_not_cached(tmp_path):
    suite = load_suite("format").limited(2)
    answered, stuck = suite.tasks
    sent: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        if json.loads(request.content)["messages"] == stuck.messages:
            sent.append(request)
            return timeout(request)  # its prefill too: a warm-up that times out is skipped
        return format_answer(answered, request)

    harness = mock_harness(tmp_path, handler)
    policy = Policy("v1", "gate-v1", "sha256:" + "ab" * 32)
    harness.run(policy, suite.limited(1))  # the first task is on disk already
    with pytest.raises(HarnessError) as caught:
        harness.run(policy, suite)
    message = str(caught.value)
    assert f"task {stuck.task_id} ran past its {suite.config.time_limit_s:g}s time limit 3 times" in message
    assert "RATCHET_CONCURRENCY" in message and "time_limit_s" in message
    assert [prefill(r) for r in sent] == [True, False, False, False]  # sent, then retried twice
    assert [r["task_id"] for r in read_jsonl(harness.results_path(policy, suite))] == [answered.task_id]


def test_a_versions_results_as_champion_are_not_its_results_as_candidate(tmp_path):
    harness = Harness("http://vllm.test", "m", tmp_path)
    suite = load_suite("format")
    digest = "sha256:" + "cd" * 32
    as_candidate = harness.results_path(Policy("v3", "gate-v3-1a2b", digest, "candidate"), suite)
    as_champion = harness.results_path(Policy("v3", "gate-v3-3c4d", digest, "champion"), suite)
    assert as_candidate != as_champion and as_candidate.name == as_champion.name
    assert as_candidate.relative_to(tmp_path).parts[:2] == ("candidate", "v3-cdcdcdcdcdcdcdcd")
    assert as_champion.relative_to(tmp_path).parts[:2] == ("champion", "v3-cdcdcdcdcdcdcdcd")
    # the base model, under whichever temporary name it is served, keeps one path across comparisons
    base_paths = {harness.results_path(Policy("base", name, None, "champion"), suite) for name in ("a", "b")}
    assert base_paths == {tmp_path / "champion" / "base" / as_champion.name}
    drift = load_suite("drift")
    assert harness.drift_path(Policy("v3", "gate-v3-1a2b", digest), drift).parent == as_candidate.parent


def test_results_read_back_from_disk_are_marked_so_timings_count_only_requests_made(tmp_path):
    suite = load_suite("format").limited(2)
    harness = mock_harness(tmp_path, lambda request: format_answer(suite.tasks[0], request))
    policy = Policy("v1", "gate-v1", "sha256:" + "ab" * 32, "champion")
    first = harness.run(policy, suite.limited(1))  # the first task run now, then on disk
    again = harness.run(policy, suite)
    assert [r.cached for r in first] == [False]
    assert [r.cached for r in again] == [True, False]
    assert again[0].seconds == first[0].seconds  # its request time is kept, for the record
    assert all("cached" not in r for r in read_jsonl(harness.results_path(policy, suite)))


def test_a_new_prompt_prefix_is_prefilled_first_and_one_sent_before_is_not(tmp_path):
    """The first run sends one one-token request per new prefix and waits for them (vLLM's prefix
    cache fills), then every task at once (a barrier holds the first ones until all are in flight);
    a later run of the same model on prefixes sent already sends only the tasks; a newly loaded
    adapter warms up again. The prefills are no task's result."""
    suite = load_suite("target")
    prefix = {t.task_id: json.dumps(t.messages[:-1]) for t in suite.tasks}
    events: list[tuple[str, str, bool]] = []  # (start or end, prefix, prefill-only)
    held: list[int] = []  # how many of the first requests wait for each other at a barrier
    barrier: list[threading.Barrier] = []
    lock = threading.Lock()

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        task = next(i for i, p in prefix.items() if json.dumps(body["messages"][:-1]) == p)
        warm_up = prefill(request)
        with lock:
            events.append(("start", prefix[task], warm_up))
            wait = sum(kind == "start" for kind, _, _ in events) <= held[0]
        if wait:
            barrier[0].wait()
        with lock:
            events.append(("end", prefix[task], warm_up))
        content = "x" if warm_up else "not a tool call"
        choices = [{"index": i, "message": {"content": content}} for i in range(body["n"])]
        return httpx.Response(200, json={"choices": choices, "usage": {"completion_tokens": 1}})

    def run(policy: Policy, tasks: list, together: int) -> list[TaskResult]:
        events.clear()
        held[:] = [together]
        barrier[:] = [threading.Barrier(together, timeout=10)]  # breaks unless that many are in flight
        return harness.run(policy, dataclasses.replace(suite, tasks=tasks))

    def starts(warm_up: bool) -> list[int]:
        return [i for i, (kind, _, p) in enumerate(events) if kind == "start" and p == warm_up]

    def prefilled_first(tasks: list) -> bool:
        """One prefill per prefix of ``tasks``, each ended before any task started, then every task."""
        first_task = starts(False)[0]
        prefills = [events[i][1] for i in starts(True)]
        ended = [i for i, (kind, _, p) in enumerate(events) if kind == "end" and p]
        return (
            sorted(prefills) == sorted({prefix[t.task_id] for t in tasks})
            and max(ended) < first_task
            and len(starts(False)) == len(tasks)
        )

    harness = mock_harness(tmp_path, handler)
    new = len({prefix[t.task_id] for t in suite.tasks[:16]})
    assert 1 < new < 12
    v1, v2 = (Policy(v, f"gate-{v}-a", "sha256:" + v[1] * 64) for v in ("v1", "v2"))
    results = run(v1, suite.tasks[:16], together=new)
    assert prefilled_first(suite.tasks[:16])
    assert [r.task_id for r in results] == [t.task_id for t in suite.tasks[:16]]
    assert all(text == "not a tool call" for r in results for text in r.texts)  # no prefill among them
    run(v1, suite.tasks[16:28], together=12)  # the same prefixes: only the tasks, all at once
    assert starts(True) == [] and len(starts(False)) == 12
    run(v2, suite.tasks[:16], together=new)  # another model name: new prefixes
    assert prefilled_first(suite.tasks[:16])


def test_the_decision_metrics_say_where_the_comparisons_time_went():
    suites = [SimpleNamespace(name=n, is_drift=d) for n, d in (
        ("target", False), ("general", False), ("drift", True), ("drift-code", True))]  # fmt: skip
    timings = {
        "target": {"candidate": 30.0, "champion": 10.0},
        "general": {"candidate": 6.0},
        "drift": {"candidate": 20.5, "kl": 12.25},
        "drift-code": {"candidate": 4.0},  # its KL was on disk already
        "tasks_wall": {"all": 25.0},
        "target_rounds": {"rounds": 3, "tasks": 24},
    }
    assert phase_seconds(timings, suites) == {  # the drift ran beside the task suites: 49.5 > 25 + 20.5
        "gate.tasks_seconds": 25.0,
        "gate.drift_seconds": 24.5,
        "gate.kl_seconds": 12.25,
    }
    # rejected on the target's rounds: no drift suite ran
    assert phase_seconds({"target": {"candidate": 9.0}, "tasks_wall": {"all": 7.0}}, suites) == {
        "gate.tasks_seconds": 7.0
    }


class PacedHarness:
    """A harness that answers at once (every sample passes) but holds the guard suites' requests
    until the drift's samples have been asked for: an evaluation that runs drift only after them
    never gets there, and the guards give up waiting."""

    def __init__(self, tmp_path):
        self.tmp_path, self.drift_asked, self.log = tmp_path, threading.Event(), []

    def load_adapter(self, name, path):
        self.log.append("load")

    def unload_adapter(self, name):
        self.log.append("unload")

    def run_all(self, jobs):
        if any(suite.name != "target" for _, suite in jobs):
            self.log.append("guards asked")
            if not self.drift_asked.wait(timeout=30):
                raise HarnessError("the drift was not asked for while the guard suites ran")
            self.log.append("guards done")
        return [[TaskResult(t.task_id, [True], [{}], ["x"]) for t in suite.tasks] for _, suite in jobs]

    def drift_path(self, candidate, suite):
        return self.tmp_path / f"{candidate.key}-{suite.name}.drift.json"

    def drift_samples(self, candidate, suite):
        self.log.append("drift asked")
        self.drift_asked.set()
        return []


def test_the_drift_runs_beside_the_other_task_suites_and_before_the_adapters_are_unloaded(tmp_path):
    suites = [load_suite(name).limited(2) for name in ("target", "general", "drift")]
    settings = GateSettings(gate_dir=tmp_path, sequential=False)
    harness = PacedHarness(tmp_path)
    evaluator = Evaluator(settings, harness, suites)
    kl = {"kl": 0.01, "engine_gap": 0.0, "tokens": 5}
    evaluator._scorer = SimpleNamespace(
        kl=lambda samples, path, references, key: dict.fromkeys(references, kl)
    )

    def adapter(version):
        return SimpleNamespace(
            version=version, path=tmp_path, manifest=SimpleNamespace(content_hash="sha256:" + version * 8)
        )

    out = evaluator.measure(adapter("v2"), adapter("v1"))

    assert harness.log.index("drift asked") < harness.log.index("guards done")
    assert harness.log[-2:] == ["unload", "unload"]  # after both sides finished
    assert out.drift["drift.kl_base"] == out.drift["drift.kl_champion"] == 0.01
    assert set(out.candidate) >= {"target.pass_at_1", "general.pass"}
    assert {"tasks_wall", "drift"} <= set(out.timings)


def test_target_rounds_run_ahead_of_the_verdict_which_reads_only_its_own_rounds(tmp_path):
    """The first task's request is held until a later round's request has arrived: rounds run one
    after the other never get there (the hold gives up and the test fails). The verdict, its rounds
    and the target's scores are those of rounds run one after the other on the same outcomes."""
    target = load_suite("target").limited(40)
    by_messages = {json.dumps(t.messages): t for t in target.tasks}
    settings = GateSettings(gate_dir=tmp_path, zero_adapter_base=False, round_tasks=4, sequential_min_tasks=8)
    order = task_order([t.task_id for t in target.tasks], settings.gate_seed)
    position = {task_id: i for i, task_id in enumerate(order)}
    later_round_asked, held = threading.Event(), []

    def passes(task, model: str) -> bool:  # the candidate solves two tasks of three, the base one of four
        if model.startswith("gate-v1"):
            return position[task.task_id] % 3 != 0
        return position[task.task_id] % 4 == 0

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path != "/v1/chat/completions":
            return httpx.Response(200, json={})  # adapters loaded and unloaded
        body = json.loads(request.content)
        task = by_messages[json.dumps(body["messages"])]
        if position[task.task_id] >= settings.round_tasks and not prefill(request):
            later_round_asked.set()
        if position[task.task_id] == 0 and not prefill(request):
            held.append(later_round_asked.wait(timeout=10))
        expression = task.expected["reference"] if passes(task, body["model"]) else "0"
        text = tool_call("calculator", expression=expression)
        choices = [{"index": i, "message": {"content": text}} for i in range(body["n"])]
        return httpx.Response(200, json={"choices": choices, "usage": {"completion_tokens": 1}})

    harness = mock_harness(tmp_path / "results", handler)
    candidate = SimpleNamespace(
        version="v1", path=tmp_path, manifest=SimpleNamespace(content_hash="sha256:" + "1" * 64)
    )
    evaluator = Evaluator(settings, harness, [target])
    measured = evaluator.measure(candidate, None)

    by_id = {t.task_id: t for t in target.tasks}
    diffs = np.array([float(passes(by_id[i], "gate-v1")) - float(passes(by_id[i], "base")) for i in order])
    alpha, least, size = 1.0 - settings.confidence, settings.sequential_min_tasks, settings.round_tasks
    futility = settings.futility_power
    verdicts = [
        (
            number,
            end,
            sequential_target(diffs[:end], settings.min_gain, alpha, least, size, len(order), futility),
        )
        for number, (_, end) in enumerate(rounds(len(order), size), start=1)
    ]
    number, end, expected = next(v for v in verdicts if v[2].decision != "continue")
    assert held == [True, True]  # the later round came while the first task (both policies) was held
    assert measured.sequential == expected and expected.decision != "continue"
    assert measured.timings["target_rounds"] == {"rounds": number, "tasks": end}
    assert set(measured.candidate[TARGET]) == set(order[:end]) == set(measured.champion[TARGET])
    assert end < len(order)  # stopped before the tasks ran out
