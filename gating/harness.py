"""Runs a policy (base, champion or candidate) on a suite through the real vLLM server.

Tasks run concurrently (``concurrency`` requests in flight; ``samples`` completions
per request through ``n``). Tasks that share a prompt prefix (system message and
one-shot example) are preceded by one prefill-only request (one token) per
prefix, so vLLM's prefix cache holds the prefix before the rest arrive: with a
LoRA adapter, prefill is the costly part on a CPU. The tasks all go out after
it: waiting instead for one whole task per prefix (every token it samples) held
each new adapter's first round back by that task's generation. A prefix the
harness has sent before (to the same model name: each loading of an adapter gets
a new one) is not warmed again. A request that runs past its suite's
``time_limit_s`` is retried, and one that keeps timing out stops the run, like
vLLM being unreachable or refusing a request: a timeout says vLLM is overloaded,
not that the policy failed, so it is never scored or cached as the policy's
failure.

Results are cached per task under ``<results_dir>/<role>/<policy key>/``, and
a run resumes from them. The role (candidate or champion) is part of the key
so that a version promoted on its candidate results is measured afresh as
champion: the sample that selected it is biased upward (the winner's curse),
and comparing later candidates with it would hold them to an inflated bar. The
base model is only ever a champion, so its results are shared by every
comparison. Drift samples are the candidate's alone.

No per-request seed is sent (it crashes vLLM's CPU engine under concurrency):
sampling varies between runs, which is why the decision rule pairs tasks and
bounds its estimates.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import httpx
from tqdm import tqdm

from gating.suites import Suite
from gating.tasks import Task
from gating.verifiers import verify
from serving.vllm_admin import VLLMClient, VLLMError

Role = Literal["candidate", "champion"]
MAX_WARM = 4096  # prompt prefixes remembered as sent (a few per suite and adapter loading)


class HarnessError(RuntimeError):
    """vLLM could not run the suite (unreachable, refused a request, or kept timing out)."""


@dataclass(frozen=True)
class Policy:
    label: str  # "base" or an adapter version ("v7")
    model: str  # the name vLLM serves it under
    content_hash: str | None = None
    role: Role = "candidate"  # which side of a comparison it is on; results are cached per role

    @property
    def key(self) -> str:
        """Names cached results: the base model, or a version *and* its content hash."""
        return (
            "base" if self.content_hash is None else f"{self.label}-{self.content_hash.split(':')[-1][:16]}"
        )


@dataclass
class TaskResult:
    task_id: str
    passed: list[bool]
    details: list[dict[str, Any]]
    texts: list[str]
    completion_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None
    cached: bool = field(default=False, compare=False)  # read from disk, not run by this call (not stored)

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["cached"]
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TaskResult:
        return cls(**data)


@dataclass
class DriftSample:
    """A completion the candidate sampled for one reference prompt, with vLLM's per-token log-probs."""

    task_id: str
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: dict[str, list[float]] = field(default_factory=dict)  # policy key -> per-token log-probs


def _prompt_prefix(task: Task) -> str:
    return json.dumps(task.messages[:-1])


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a JSONL file; a torn last line (a write cut short) is ignored."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def _append_jsonl(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class Harness:
    def __init__(
        self,
        vllm_url: str,
        base_model: str,
        results_dir: Path,
        concurrency: int = 16,
        progress: bool = False,
        timeout_retries: int = 2,
        transport: httpx.BaseTransport | None = None,  # None: the network (tests pass a MockTransport)
    ):
        # one connection pool: adapters in and out through the replica client, generation through its http
        self.admin = VLLMClient(vllm_url, timeout_s=httpx.Timeout(600.0, connect=10.0), transport=transport)
        self.http = self.admin.http
        self.base_model = base_model
        self.results_dir = Path(results_dir)
        self.concurrency = concurrency
        self.progress = progress
        self.timeout_retries = timeout_retries  # a request past its time limit is sent again this often
        self._warm: set[str] = set()  # digests of the prompt prefixes (model included) sent already

    def close(self) -> None:
        self.admin.close()

    # --- requests ------------------------------------------------------------------------

    def _post(self, path: str, body: dict[str, Any], timeout_s: float | None = None) -> httpx.Response:
        """POST to vLLM; a connection dropped in passing is retried twice, a refusal is an error."""
        for attempt in range(3):
            try:
                resp = self.http.post(path, json=body, timeout=timeout_s or httpx.USE_CLIENT_DEFAULT)
                break
            except httpx.TimeoutException:
                raise
            except (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError) as exc:
                if attempt == 2:
                    raise HarnessError(
                        f"vLLM at {self.http.base_url} dropped the connection: {exc}"
                    ) from None
                time.sleep(1.0)
            except httpx.HTTPError as exc:
                raise HarnessError(f"vLLM at {self.http.base_url} is unreachable: {exc}") from None
        if resp.status_code >= 400:
            raise HarnessError(f"vLLM {path} answered {resp.status_code}: {resp.text[:300]}")
        return resp

    def _post_in_time(self, path: str, body: dict[str, Any], time_limit_s: float, task_id: str) -> Any:
        """The JSON answer to a request that must finish within ``time_limit_s``, retried when it does not.

        A timeout means vLLM had more in flight than it could answer in time; it is
        no verdict on the policy, so one that persists stops the run.
        """
        for _ in range(self.timeout_retries + 1):
            try:
                return self._post(path, body, timeout_s=time_limit_s).json()
            except httpx.TimeoutException:
                continue
        raise HarnessError(
            f"task {task_id} ran past its {time_limit_s:g}s time limit {self.timeout_retries + 1} times: "
            f"vLLM did not answer in time with up to {self.concurrency} requests in flight. Lower the "
            f"gate's concurrency (RATCHET_CONCURRENCY) or raise the suite's time_limit_s"
        )

    def _run_task(self, policy: Policy, suite: Suite, task: Task) -> TaskResult:
        cfg = suite.config
        body = {
            "model": policy.model,
            "messages": task.messages,
            "n": cfg.samples,
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
        }
        start = time.monotonic()
        data = self._post_in_time("/v1/chat/completions", body, cfg.time_limit_s, task.task_id)
        texts = [c["message"]["content"] or "" for c in sorted(data["choices"], key=lambda c: c["index"])]
        verdicts = [verify(task, text) for text in texts]
        return TaskResult(
            task.task_id,
            [v.passed for v in verdicts],
            [v.details for v in verdicts],
            texts,
            int(data.get("usage", {}).get("completion_tokens", 0)),
            round(time.monotonic() - start, 3),
        )

    def _prefill(self, model: str, suite: Suite, task: Task) -> None:
        """One token for ``task``'s prompt: vLLM computes the prompt, and its prefix cache keeps the
        blocks (the system message and worked example the task shares with others)."""
        body = {"model": model, "messages": task.messages, "n": 1, "max_tokens": 1, "temperature": 0.0}
        with contextlib.suppress(httpx.TimeoutException):  # only a warm-up: the tasks still run
            self._post("/v1/chat/completions", body, timeout_s=suite.config.time_limit_s)

    def _map(
        self,
        label: str,
        fn: Callable[[Any], Any],
        items: list[Any],
        prompt_of: Callable[[Any], tuple[str, Suite, Task]],
    ):
        """``(item, fn(item))`` for every item, as they finish; ``prompt_of(item)`` is the (model,
        suite, task) it prompts. For each prompt prefix not sent to that model before, a one-token
        prefill of one of its items goes first.

        The prefills fill vLLM's prefix cache, so the items find their system message and example
        cached; each takes a prompt's computation, not a whole task's generation.
        """
        firsts: dict[str, tuple[str, Suite, Task]] = {}
        for item in items:
            model, suite, task = prompt_of(item)
            digest = hashlib.sha256((model + _prompt_prefix(task)).encode()).hexdigest()
            if digest not in self._warm:
                firsts.setdefault(digest, (model, suite, task))
        bar = tqdm(total=len(items), desc=label, file=sys.stderr, disable=not self.progress, leave=False)
        pool = ThreadPoolExecutor(self.concurrency)
        try:
            for future in [pool.submit(self._prefill, *prompt) for prompt in firsts.values()]:
                future.result()
            if len(self._warm) + len(firsts) > MAX_WARM:  # adapters come and go: forget old ones
                self._warm.clear()
            self._warm.update(firsts)
            futures = {pool.submit(fn, item): item for item in items}  # started in the items' order
            for future in as_completed(futures):
                bar.update(1)
                yield futures[future], future.result()
        finally:  # also when the caller stops early: what has not started never will
            pool.shutdown(wait=True, cancel_futures=True)
            bar.close()

    def load_adapter(self, name: str, path: Path) -> None:
        """Load a LoRA adapter folder under ``name`` (vLLM refuses a name already loaded)."""
        try:
            self.admin.load_adapter(name, path)
        except (VLLMError, httpx.HTTPError) as exc:
            raise HarnessError(f"vLLM could not load {name} from {path}: {exc}") from None

    def unload_adapter(self, name: str) -> None:
        try:
            self.admin.unload_adapter(name)
        except (VLLMError, httpx.HTTPError) as exc:
            raise HarnessError(f"vLLM could not unload {name}: {exc}") from None

    def adapters(self) -> list[str]:
        """Names vLLM serves now (the base model and loaded adapters)."""
        return self.admin.models()

    # --- suites of verified tasks -----------------------------------------------------------

    def results_path(self, policy: Policy, suite: Suite) -> Path:
        """Where ``policy``'s results on ``suite`` are cached: per role, so a champion is measured afresh."""
        return self.results_dir / policy.role / policy.key / f"{suite.key.replace('#', '-')}.jsonl"

    def cached(self, policy: Policy, suite: Suite) -> set[str]:
        """Ids of the tasks of ``suite`` whose results for ``policy`` are on disk."""
        ids = {t.task_id for t in suite.tasks}
        return {r["task_id"] for r in _read_jsonl(self.results_path(policy, suite))} & ids

    def run(self, policy: Policy, suite: Suite) -> list[TaskResult]:
        """Results for every task of ``suite``, in suite order; tasks already on disk are not re-run."""
        return self.run_all([(policy, suite)])[0]

    def run_all(self, jobs: list[tuple[Policy, Suite]]) -> list[list[TaskResult]]:
        """:meth:`run` for several (policy, suite) pairs at once, all their tasks in one pool.

        Bigger batches make vLLM faster on a CPU; each result is on disk as soon as it is in.
        """
        done: list[dict[str, TaskResult]] = [{} for _ in jobs]
        for index, result in self.stream(jobs):
            done[index][result.task_id] = result
        return [[done[i][t.task_id] for t in suite.tasks] for i, (_, suite) in enumerate(jobs)]

    def stream(self, jobs: list[tuple[Policy, Suite]]) -> Iterator[tuple[int, TaskResult]]:
        """``(job index, result)`` for every task of every job: those on disk first, then the rest as
        they finish. Requests start in task order, the jobs in turn at each position (the first task
        of every job, then the second, ...), so a caller reading a suite's rounds finds its first
        rounds complete first. Closing the iterator early cancels the requests not started yet; each
        result is on disk once yielded."""
        todo: list[tuple[int, int, Task]] = []  # (position in its suite, job index, task)
        for index, (policy, suite) in enumerate(jobs):
            cached = {r["task_id"]: r for r in _read_jsonl(self.results_path(policy, suite))}
            for position, task in enumerate(suite.tasks):
                if task.task_id in cached:
                    yield index, TaskResult.from_json(cached[task.task_id] | {"cached": True})
                else:
                    todo.append((position, index, task))
        items = [(index, task) for _, index, task in sorted(todo, key=lambda x: x[:2])]
        if not items:
            return

        def run_one(item: tuple[int, Task]) -> TaskResult:
            policy, suite = jobs[item[0]]
            return self._run_task(policy, suite, item[1])

        def prompt(item: tuple[int, Task]) -> tuple[str, Suite, Task]:
            policy, suite = jobs[item[0]]
            return policy.model, suite, item[1]

        label = ", ".join(f"{suite.name} {policy.label}" for policy, suite in jobs)
        with contextlib.closing(self._map(label, run_one, items, prompt)) as finished:
            for (index, _), result in finished:
                policy, suite = jobs[index]
                _append_jsonl(self.results_path(policy, suite), result.to_json())
                yield index, result

    # --- drift -----------------------------------------------------------------------------

    def drift_path(self, candidate: Policy, suite: Suite) -> Path:
        """Where the candidate's drift samples are cached (the champion samples none)."""
        return self.results_dir / "candidate" / candidate.key / f"{suite.key.replace('#', '-')}.drift.json"

    def drift_samples(self, candidate: Policy, suite: Suite) -> list[DriftSample]:
        """The candidate's sampled continuation of each reference prompt, with vLLM's log-probs."""
        path = self.drift_path(candidate, suite)
        cached = json.loads(path.read_text()) if path.exists() else []
        samples = {s["task_id"]: DriftSample(**s) for s in cached}
        missing = [t for t in suite.tasks if t.task_id not in samples]
        if missing:
            label = f"{suite.name} {candidate.label}"
            for _, sample in self._map(
                label,
                lambda t: self._sample(candidate, suite, t),
                missing,
                lambda t: (candidate.model, suite, t),
            ):
                samples[sample.task_id] = sample
            self._save_drift(path, samples)
        return [samples[t.task_id] for t in suite.tasks]

    @staticmethod
    def _save_drift(path: Path, samples: dict[str, DriftSample]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(s) for s in samples.values()]))
        os.replace(tmp, path)

    def _sample(self, policy: Policy, suite: Suite, task: Task) -> DriftSample:
        cfg = suite.config
        prompt_ids = self._post(
            "/tokenize", {"model": self.base_model, "messages": task.messages, "add_generation_prompt": True}
        ).json()["tokens"]
        body = {
            "model": policy.model,
            "prompt": prompt_ids,
            "max_tokens": cfg.max_tokens,
            "temperature": cfg.temperature,
            "logprobs": 0,
            "return_token_ids": True,
        }
        data = self._post_in_time("/v1/completions", body, cfg.time_limit_s, task.task_id)
        choice = data["choices"][0]
        logprobs = [float(x) for x in choice["logprobs"]["token_logprobs"]]
        return DriftSample(task.task_id, prompt_ids, list(choice["token_ids"]), {policy.key: logprobs})
