import dataclasses

import pytest

from gating.harness import Harness, HarnessError, Policy
from gating.suites import load_suite
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
def test_a_task_past_its_time_limit_fails_with_that_reason(vllm_url, served_model, tmp_path):
    suite = load_suite("target").limited(2)
    suite = dataclasses.replace(suite, config=dataclasses.replace(suite.config, time_limit_s=0.001))
    results = Harness(vllm_url, served_model, tmp_path).run(Policy("base", served_model), suite)
    assert [r.error for r in results] == ["time limit 0.001s"] * 2
    assert all(r.passed == [False] * suite.config.samples for r in results)
