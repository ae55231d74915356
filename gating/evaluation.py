"""Measuring a candidate against the champion: the suites' per-task scores, drift, and the target's
sequential verdict.

    load both on vLLM under temporary names → the target in rounds (stop once its
    anytime bound settles the gain; a clear loser stops everything) → the other task
    suites, both policies in one request pool, and beside them drift (the candidate's
    samples on vLLM, then the KL with PEFT on the CPU) → unload

The target's tasks are scored in a seeded order fixed before any score is seen
(``gating.sequential.task_order``), ``round_tasks`` at a time for both policies;
after each round ``sequential_target`` reads the anytime-valid bounds of the mean
paired gain. Results are cached per task (``gating.harness``), so a re-run, or
the next candidate against the same champion, resumes from what is on disk.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from gating.decisions import BASE
from gating.harness import Harness, HarnessError, Policy, Role, TaskResult
from gating.metrics import task_scores
from gating.rule import TARGET, Scores
from gating.sequential import Outcome, rounds, sequential_target, task_order
from gating.settings import GateSettings
from gating.suites import Suite
from learner.store import StoredAdapter
from learner.store import zero_adapter as _zero_adapter


class GateError(RuntimeError):
    pass


@dataclass
class Measured:
    candidate: Scores = field(default_factory=dict)
    champion: Scores = field(default_factory=dict)
    drift: dict[str, float] = field(default_factory=dict)
    raw: dict[str, list] = field(default_factory=dict)  # "<role>/<suite>" -> per-task results (JSON)
    sequential: Outcome | None = None  # the target's verdict from its rounds; None: not run in rounds
    # per suite and role: summed request seconds (a drift suite: its wall time as "candidate", the
    # KL's part of it as "kl"); "tasks_wall": wall time of the task suites; "target_rounds": rounds
    # run and target tasks used
    timings: dict[str, dict[str, float]] = field(default_factory=dict)


def phase_seconds(timings: dict[str, dict[str, float]], suites: list[Suite]) -> dict[str, float]:
    """Where a comparison's time went, as decision metrics: ``gate.tasks_seconds`` (the task
    suites, the target's rounds included), ``gate.drift_seconds`` (the drift suites: sampling and
    KL, beside the task suites after the target's rounds, so the two overlap) and
    ``gate.kl_seconds`` (the KL's part of it, on the CPU)."""
    out = {}
    if "tasks_wall" in timings:
        out["gate.tasks_seconds"] = timings["tasks_wall"]["all"]
    drift = [timings[x.name] for x in suites if x.is_drift and x.name in timings]
    if drift:
        out["gate.drift_seconds"] = round(sum(t.get("candidate", 0.0) for t in drift), 2)
        out["gate.kl_seconds"] = round(sum(t.get("kl", 0.0) for t in drift), 2)
    return out


class Evaluator:
    def __init__(
        self,
        settings: GateSettings,
        harness: Harness,
        suites: list[Suite],
        say: Callable[[str], None] = lambda message: None,
    ):
        self.settings, self.harness, self.suites, self.say = settings, harness, suites, say
        self._scorer = None

    @property
    def base(self) -> Policy:
        """The base model, served without an adapter; it is only ever the champion."""
        return Policy(BASE, self.settings.base_model, role="champion")

    @contextlib.contextmanager
    def loaded(
        self, stored: StoredAdapter | None, like: StoredAdapter | None, role: Role
    ) -> Iterator[Policy]:
        """The policy on vLLM under a temporary versioned name: an adapter, or the base model.

        With ``zero_adapter_base`` the base model is served through an all-zero
        copy of ``like``: vLLM-CPU mis-serves requests without an adapter when
        they share a batch with two or more adapters. ``role`` keeps a version's
        results as champion apart from the candidate results that promoted it.
        """
        if stored is None and not self.settings.zero_adapter_base:
            yield self.base
            return
        label = stored.version if stored else BASE
        zeros = self.settings.gate_dir / "zero-adapters"
        path = (
            stored.path
            if stored
            else zero_adapter(like.path if like else None, zeros, self.settings.model_dir)
        )
        name = f"gate-{label}-{uuid.uuid4().hex[:8]}"
        self.harness.load_adapter(name, path)
        try:
            yield Policy(label, name, stored.manifest.content_hash if stored else None, role)
        finally:
            with contextlib.suppress(HarnessError):
                self.harness.unload_adapter(name)

    def measure(self, candidate: StoredAdapter, champion: StoredAdapter | None) -> Measured:
        """Per-task scores of both policies, drift, and the raw per-task results.

        The champion's results are its own as champion, never the candidate results
        that promoted it (those are biased upward by the selection).
        """
        out = Measured()
        with (
            self.loaded(candidate, candidate, "candidate") as cand,
            self.loaded(champion, candidate, "champion") as champ,
        ):
            task_suites = [x for x in self.suites if not x.is_drift]
            target = next((x for x in task_suites if x.name == "target"), None)
            self.say(
                f"{cand.label} and {champ.label} on "
                + ", ".join(f"{x.name} ({len(x.tasks)} tasks)" for x in task_suites)
            )
            start = time.monotonic()
            if target is not None and self.settings.sequential:
                out.sequential = self._target_rounds(target, cand, champ, out)
                task_suites = [x for x in task_suites if x is not target]
            if out.sequential is not None and out.sequential.decision == "reject":
                out.timings["tasks_wall"] = {"all": round(time.monotonic() - start, 2)}
                self.say(f"target: {out.sequential.reason}; the other suites are not run")
                return out
            # drift beside the other task suites: its samples join their requests on vLLM, and its
            # KL (on the CPU) runs while they are sampled. The thread returns its numbers, folded
            # into ``out`` once it is joined, before the adapters are unloaded.
            with ThreadPoolExecutor(1, thread_name_prefix="gate-drift") as pool:
                drifting = pool.submit(self._drift, cand, champ, candidate, champion)
                jobs = [(policy, suite) for suite in task_suites for policy in (cand, champ)]
                for (policy, suite), results in zip(jobs, self.harness.run_all(jobs), strict=True):
                    self._add(out, policy, suite, results)
                out.timings["tasks_wall"] = {"all": round(time.monotonic() - start, 2)}
                drift, timings = drifting.result()
                out.drift |= drift
                out.timings |= timings
        return out

    def champion_todo(self, champion: StoredAdapter | None) -> list[Suite]:
        """What a comparison against ``champion`` would sample of it that is not on disk yet, in
        the order it would: the target's rounds (in the comparison's task order), then the other
        task suites a round's worth of tasks at a time (drift samples only the candidate)."""
        s = self.settings
        policy = (
            Policy(champion.version, "", champion.manifest.content_hash, "champion")
            if champion
            else Policy(BASE, "", None, "champion")
        )
        todo = []
        for suite in self.suites:
            if suite.is_drift:
                continue
            tasks = suite.tasks
            if suite.name == "target" and s.sequential:
                by_id = {t.task_id: t for t in tasks}
                tasks = [by_id[i] for i in task_order(list(by_id), s.gate_seed)]
            done = self.harness.cached(policy, suite)
            for begin, end in rounds(len(tasks), s.round_tasks):
                part = [t for t in tasks[begin:end] if t.task_id not in done]
                if part:
                    todo.append(Suite(suite.config, part, suite.content_hash))
        return todo

    def prefetch(self, champion: StoredAdapter | None, like: StoredAdapter | None) -> bool:
        """Sample the next slice of :meth:`champion_todo` (one round's tasks of one suite); whether
        anything is left after it. A comparison against ``champion`` then finds these results on
        disk and samples only its candidate."""
        todo = self.champion_todo(champion)
        if not todo:
            return False
        part = todo[0]
        with self.loaded(champion, like, "champion") as champ:
            self.say(
                f"ahead of the next candidate: {champ.label} as champion on {len(part.tasks)} {part.name} tasks"
            )
            self.harness.run_all([(champ, part)])
        return len(todo) > 1

    def _target_rounds(self, target: Suite, cand: Policy, champ: Policy, out: Measured) -> Outcome:
        """Score the target round by round until its sequential verdict is not "continue" (or the
        tasks run out); the results of every round decided on are in ``out``.

        Requests run ahead of the verdict: the next rounds' tasks start while a round's slowest
        ones finish (vLLM stays as busy as ``concurrency`` allows), and each verdict reads only
        its own rounds' tasks, in the fixed order, so it is the verdict of rounds run one after
        the other. Once it stops, the requests not started yet are cancelled."""
        s = self.settings
        by_id = {t.task_id: t for t in target.tasks}
        order = task_order(list(by_id), s.gate_seed)
        ordered = Suite(target.config, [by_id[i] for i in order], target.content_hash)
        policies = (cand, champ)
        alpha = 1.0 - s.confidence
        verdict = None
        spans = rounds(len(order), s.round_tasks)
        results: list[dict[str, TaskResult]] = [{}, {}]
        number = 0
        stream = self.harness.stream([(cand, ordered), (champ, ordered)])
        try:
            for index, result in stream:
                results[index][result.task_id] = result
                while number < len(spans) and all(
                    i in results[0] and i in results[1] for i in order[spans[number][0] : spans[number][1]]
                ):
                    begin, end = spans[number]
                    number += 1
                    part = Suite(target.config, ordered.tasks[begin:end], target.content_hash)
                    for policy, done in zip(policies, results, strict=True):
                        self._add(out, policy, part, [done[t.task_id] for t in part.tasks])
                    cand_pass, champ_pass = out.candidate[TARGET], out.champion[TARGET]
                    diffs = np.array([cand_pass[t] - champ_pass[t] for t in order[:end]])
                    verdict = sequential_target(
                        diffs,
                        s.min_gain,
                        alpha,
                        s.sequential_min_tasks,
                        s.round_tasks,
                        total_tasks=len(order),
                        futility_power=s.futility_power,
                    )
                    out.timings["target_rounds"] = {"rounds": number, "tasks": end}
                    self.say(
                        f"target round {number}: {end} of {len(order)} tasks, gain {verdict.change:+.3f}, "
                        f"anytime bounds [{verdict.lower:+.3f}, {verdict.upper:+.3f}]: {verdict.decision}"
                    )
                    if verdict.decision != "continue":
                        return verdict
        finally:
            stream.close()
        return verdict

    def _add(self, out: Measured, policy: Policy, suite: Suite, results: list[TaskResult]) -> None:
        """Fold one (policy, suite) batch of results into ``out`` (rounds of one suite add up)."""
        scores = out.candidate if policy.role == "candidate" else out.champion
        for metric, per_task in task_scores(suite, results).items():
            scores.setdefault(metric, {}).update(per_task)
        out.raw.setdefault(f"{policy.role}/{suite.name}", []).extend(r.to_json() for r in results)
        timing = out.timings.setdefault(suite.name, {})
        ran = sum(r.seconds for r in results if not r.cached)  # what this evaluation spent on requests
        timing[policy.role] = round(timing.get(policy.role, 0.0) + ran, 2)

    def _drift(
        self,
        cand: Policy,
        champ: Policy,
        candidate: StoredAdapter,
        champion: StoredAdapter | None,
    ) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """KL(candidate‖base) and KL(candidate‖champion) over every drift suite (cached beside the
        candidate's samples), and per drift suite its wall time ("candidate") and the seconds the KL
        took on the CPU ("kl"): ``Measured.drift`` and ``Measured.timings`` entries."""
        drift: dict[str, float] = {}
        timings: dict[str, dict[str, float]] = {}
        for suite in [x for x in self.suites if x.is_drift]:
            started = time.monotonic()
            self.say(f"{suite.name}: {cand.label} samples {len(suite.tasks)} reference prompts")
            samples = self.harness.drift_samples(cand, suite)
            path = self.harness.drift_path(cand, suite).with_suffix(".kl.json")
            known = json.loads(path.read_text()) if path.exists() else {}
            references = {self.base.key: None} | ({champ.key: champion.path} if champion else {})
            todo = {k: v for k, v in references.items() if k not in known}
            if todo:
                self.say(f"{suite.name}: KL of {cand.label} from {', '.join(todo)} (PEFT on the CPU)")
                start = time.monotonic()
                known |= self.scorer().kl(samples, candidate.path, todo, cand.key)
                timings.setdefault(suite.name, {})["kl"] = round(time.monotonic() - start, 2)
                path.write_text(json.dumps(known, sort_keys=True))
            base, champ_kl = known[self.base.key], known[champ.key]
            drift |= {
                "drift.kl_base": base["kl"],
                "drift.kl_champion": champ_kl["kl"],
                "drift.engine_gap": base["engine_gap"],
                "drift.tokens": base["tokens"],
            }
            timings.setdefault(suite.name, {})["candidate"] = round(time.monotonic() - started, 2)
        return drift, timings

    def warm_up(self) -> bool:
        """Load the base model the drift suites score KL with, ahead of the first comparison that
        needs it (its imports and weights take seconds, more beside a busy vLLM: time a candidate
        would wait); whether it was loaded now."""
        if (
            self._scorer is not None
            or not any(x.is_drift for x in self.suites)
            or self.settings.model_dir is None
        ):
            return False
        self.say("ahead of the next candidate: loading the base model for the drift KL")
        try:
            self.scorer()
        except (OSError, ValueError) as exc:  # the comparison that needs it reports it again
            self.say(f"loading the base model for the drift KL failed: {exc}")
            return False
        return True

    def scorer(self):
        if self._scorer is None:
            from gating.drift import DriftScorer

            if self.settings.model_dir is None:
                raise GateError("the drift suite needs the base model's folder: set RATCHET_MODEL_DIR")
            self._scorer = DriftScorer(self.settings.model_dir, self.settings.torch_threads)
        return self._scorer


def zero_adapter(like: Path | None, root: Path, model_dir: Path | None = None) -> Path:
    """An adapter shaped like ``like`` (or, without one, a rank-1 one shaped from the base model in
    ``model_dir``) with every weight zero: the base model, served as an adapter
    (``learner.store.zero_adapter``, the one builder the gate and the serving controller share)."""
    return _zero_adapter(root, like=like, model_dir=None if like else model_dir)
