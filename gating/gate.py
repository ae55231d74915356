"""The gate: evaluate a candidate adapter against the champion, decide, record, move aliases.

    verify the adapter → measure candidate and champion (gating/evaluation.py: the
    target in rounds until its anytime bound settles, then the other suites and drift;
    results cached on disk) → decide (pure rule) → MLflow run → registry version →
    decision log entry (fsynced) → aliases from the log

The log entry is written before any alias moves, and aliases are always set
from the log, so a crash anywhere converges on a re-run: results already on
disk are reused, the MLflow run is found again by its decision id, a version
already decided returns its logged decision, and :meth:`Gate.reconcile` moves
the aliases.

While no candidate waits, ``ratchet gate run`` samples the champion ahead of its
next comparison, a round of tasks at a time (``prefetch_champion``): the results
are the champion's own as champion, on disk like any others, so the comparison
that follows samples only the candidate.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict

from gating import overrides
from gating.canary import (
    Observed,
    RewardedReader,
    Trial,
    Verdict,
    current_trial,
    judge,
    verdict_entry,
    watch,
)
from gating.decisions import BASE, DecisionLog, Entry, LogError, State, next_state, past_champions
from gating.evaluation import Evaluator, GateError, Measured, phase_seconds
from gating.harness import Harness, HarnessError, Policy
from gating.metrics import summary
from gating.records import Registry, read_decision_key
from gating.rule import Reason, decide
from gating.runs import Ruling, evaluation_run, ruling_run
from gating.settings import GateSettings
from learner.store import VERSION_RE, AdapterStore, StoredAdapter, StoreError, TamperedAdapter, version_number


class Gate:
    def __init__(
        self, settings: GateSettings, progress: bool = False, say: Callable[[str], None] | None = None
    ):
        self.settings = settings
        self.say = say or (lambda message: None)
        self.store = AdapterStore(settings.adapter_store_dir)
        self.log = DecisionLog(settings.decision_log_path)
        key = read_decision_key(settings.decision_key_file) if settings.decision_key_file else None
        if key is None:
            self.say(
                "no decision key (decision_key_file): champions are not signed, and a serving controller "
                "that checks signatures keeps serving what it serves"
            )
        self.registry = Registry(
            settings.mlflow_url, settings.registered_model, settings.gate_experiment, decision_key=key
        )
        self.harness = Harness(
            settings.gate_vllm_url,
            settings.base_model,
            settings.results_root,
            settings.concurrency,
            progress,
        )
        self.suites = [settings.load_suite(name) for name in settings.suites]
        self.evaluator = Evaluator(settings, self.harness, self.suites, self.say)
        self.measured: Measured | None = None

    def close(self) -> None:
        self.harness.close()

    @property
    def base(self) -> Policy:
        """The base model, served without an adapter; it is only ever the champion."""
        return self.evaluator.base

    @property
    def timings(self) -> dict[str, dict[str, float]]:
        """The last evaluation's timings (``gating.evaluation.Measured.timings``)."""
        return self.measured.timings if self.measured else {}

    def decision_id(self, candidate: StoredAdapter, champion: StoredAdapter | None) -> str:
        s = self.settings
        key = {
            "candidate": [candidate.version, candidate.manifest.content_hash],
            "champion": [champion.version, champion.manifest.content_hash] if champion else BASE,
            "suites": [x.key for x in self.suites],
            "max_tasks": s.max_tasks_per_suite,
            **({"suite_max_tasks": s.suite_max_tasks} if s.suite_max_tasks else {}),
            "rule": asdict(s.rule()),
            **({"rounds": [s.round_tasks, s.sequential_min_tasks]} if s.sequential else {}),
        }
        return "d-" + hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:20]

    def evaluate(self, version: str, force: bool = False) -> Entry:
        """Decide on ``version``; a version already decided returns its logged decision (unless ``force``)."""
        prior = self.log.latest_for(version, "evaluate")
        if prior is not None and not force:
            self.reconcile()
            return prior
        if version == self.log.state().champion:
            raise GateError(f"{version} is the champion already; there is nothing to compare it with")
        try:
            candidate = self.store.verify(version)
        except TamperedAdapter as exc:
            return self._refuse_tampered(version, str(exc))
        for _ in range(3):
            entry = self._evaluate_against(candidate, self.log.state().champion)
            if entry is not None:
                self.reconcile()
                return entry
            decided = self.log.latest_for(version)
            if decided is not None and not force:  # decided by hand meanwhile: that stands
                self.say(
                    f"{version} was decided meanwhile ({decided.action} -> {decided.decision}); not evaluated"
                )
                return decided
            self.say("the champion changed during the evaluation; evaluating again against the new one")
        raise GateError(f"the champion kept changing while {version} was evaluated")

    def _evaluate_against(self, candidate: StoredAdapter, champion_version: str | None) -> Entry | None:
        champion = self.store.verify(champion_version) if champion_version else None
        decision_id = self.decision_id(candidate, champion)
        logged = self.log.find(decision_id)
        if logged is not None:
            return logged
        champion_label = champion.version if champion else BASE
        self.say(f"evaluating {candidate.version} against {champion_label}")
        started = time.monotonic()
        self.measured = measured = self.evaluator.measure(candidate, champion)
        decision = decide(
            measured.candidate,
            measured.champion,
            measured.drift.get("drift.kl_base"),
            measured.drift.get("drift.kl_champion"),
            self.settings.rule(),
            champion_is_base=champion is None,
            sequential=measured.sequential,
        )
        metrics = summary(measured.candidate)
        metrics |= {f"champion.{k}": v for k, v in summary(measured.champion).items()}
        metrics |= measured.drift | decision.evidence
        metrics["gate.seconds"] = round(time.monotonic() - started, 2)  # measuring, not recording
        metrics |= phase_seconds(measured.timings, self.suites)
        run = evaluation_run(
            self.settings, self.suites, self.store, decision_id, candidate, champion_label, decision,
            metrics, measured.raw,
        )  # fmt: skip
        run_id = self.registry.log_run(
            decision_id, run.name, run.params, run.metrics, run.tags, run.artifacts
        )
        self.registry.ensure_version(candidate.version, candidate.manifest.content_hash, run_id)
        with self.log.locked() as entries:
            now = entries[-1].state if entries else State()
            if now.champion != champion_version:
                return None
            entry = Entry(
                decision_id=decision_id,
                version=candidate.version,
                action="evaluate",
                decision=decision.decision,
                actor="gate",
                reasons=[asdict(r) for r in decision.reasons],
                champion_before=champion_version,
                state=next_state(
                    entries, candidate.version, "evaluate", decision.decision, canary=self.settings.canary
                ),
                content_hash=candidate.manifest.content_hash,
                run_id=run_id,
                metrics=metrics,
                suites={s.name: s.key for s in self.suites},
            )
            return self.log.append(entry)

    def _refuse_tampered(self, version: str, message: str) -> Entry:
        with self.log.locked() as entries:
            state = entries[-1].state if entries else State()
            entry = Entry(
                decision_id="t-" + uuid.uuid4().hex[:20],
                version=version,
                action="evaluate",
                decision="reject",
                actor="gate",
                reasons=[asdict(Reason("tampered", message))],
                champion_before=state.champion,
                state=state,
            )
            return self.log.append(entry)

    # --- manual review -------------------------------------------------------------------------

    def override(self, action: str, version: str, reason: str, actor: str) -> Entry:
        """approve | reject | rollback ``version`` by hand; recorded exactly like a gate decision."""
        decision, reasons = overrides.check(action, version, reason, actor)
        stored = None if version == BASE else self.store.verify(version)
        return self._record(Ruling(action, version, stored, decision, actor, reasons, {}, override=True))

    def _record(self, r: Ruling, before: State | None = None) -> Entry | None:
        """An override or a canary verdict, recorded exactly like a gate decision: MLflow run, registry
        version, decision log entry, aliases. ``before``: the state the decision was made in (None if
        any); when the log has moved on since, nothing is recorded and None is returned."""
        with self.log.locked() as entries:
            if r.action == "rollback" and r.version not in past_champions(entries):
                raise LogError(f"{r.version} was never champion; approve it instead of rolling back to it")
            state = entries[-1].state if entries else State()
            if before is not None and state != before:
                return None
            decision_id = ("o-" if r.override else "c-") + uuid.uuid4().hex[:20]
            run = ruling_run(self.store, r, state.champion or BASE)
            run_id = self.registry.log_run(
                decision_id, run.name, run.params, run.metrics, run.tags, run.artifacts
            )
            if r.stored is not None:
                self.registry.ensure_version(r.version, r.stored.manifest.content_hash, run_id)
            trial = self.settings.canary and r.action == "approve"
            entry = self.log.append(
                Entry(
                    decision_id=decision_id,
                    version=r.version,
                    action=r.action,
                    decision=r.decision,
                    actor=r.actor,
                    reasons=r.reasons,
                    champion_before=state.champion,
                    state=next_state(entries, r.version, r.action, r.decision, canary=trial),
                    content_hash=r.stored.manifest.content_hash if r.stored else None,
                    run_id=run_id,
                    metrics=r.metrics,
                )
            )
        self.reconcile()
        return entry

    # --- a champion on trial (gating/canary.py) ----------------------------------------------

    def trial(self) -> Trial | None:
        """The champion on trial, the champion it would replace, and when its trial began."""
        return current_trial(self.log.entries())

    def judge_trial(self, trial: Trial, observed: list[Observed], now: float) -> Verdict:
        s = self.settings
        return judge(
            observed, trial.canary, trial.incumbent, trial.since, now, s.canary_margin,
            1.0 - s.confidence, s.canary_min_pairs, s.canary_max_pairs, s.canary_max_s,
        )  # fmt: skip

    def conclude(self, trial: Trial, verdict: Verdict) -> Entry | None:
        """Record a canary verdict: the trial ends (confirm), or the incumbent is champion again (rollback).
        None when the log moved on meanwhile (a reviewer decided first)."""
        before = State(trial.canary, self.log.state().challenger, trial.canary)
        metrics = {k: v for k, v in verdict.evidence.items() if v == v}  # NaN: not measured
        action, version, reasons = verdict_entry(trial, verdict)
        stored = None if version == BASE else self.store.verify(version)
        return self._record(Ruling(action, version, stored, "promote", "canary", reasons, metrics), before)

    def run_trial(self, trial: Trial, stop: threading.Event) -> Entry | None:
        """Watch the live traffic of a champion on trial until the judge's verdict, and record it."""
        s = self.settings
        self.say(
            f"{trial.canary} is on trial against {trial.incumbent or BASE}: live sessions from "
            f"{s.rewarded_topic} on {s.kafka_bootstrap}"
        )
        reader = RewardedReader(s.kafka_bootstrap, s.rewarded_topic, trial.since)
        try:
            verdict = watch(
                reader, lambda seen, now: self.judge_trial(trial, seen, now), stop.wait, say=self.say
            )
        finally:
            reader.close()
        if verdict is None:
            return None
        entry = self.conclude(trial, verdict)
        self.say(f"{trial.canary}: {verdict.decision}: {verdict.reason}")
        return entry

    # --- aliases and the watch loop ----------------------------------------------------------

    def reconcile(self) -> dict[str, str | None]:
        entries = self.log.entries()
        state = entries[-1].state if entries else State()
        return self.registry.reconcile(state, entries)

    def undecided(self) -> list[str]:
        """Versions in the store the log says nothing about (a version decided by hand counts as decided).

        With ``latest_only``, just the newest of them, if no newer version is decided already.
        """
        decided = {e.version for e in self.log.entries()}
        pending = [v for v in self.store.versions() if v not in decided]
        if not self.settings.latest_only:
            return pending
        newest_decided = max((version_number(v) for v in decided if VERSION_RE.match(v)), default=0)
        return [v for v in pending[-1:] if version_number(v) > newest_decided]

    def run_forever(self, stop: threading.Event, beat: Callable[..., None] = lambda **_: None) -> None:
        """Evaluate every new version in the store, oldest first, until ``stop`` is set.

        ``beat(**status)`` is called on every poll and around each evaluation (``/health``).
        """
        self.reconcile()
        decided = 0
        while not stop.is_set():
            trial = self.trial() if self.settings.canary else None
            if trial is not None:  # no candidate is evaluated against a champion on trial
                beat(evaluating=None, canary=trial.canary, champion=trial.canary)
                if self.run_trial(trial, stop) is not None:
                    decided += 1
                beat(canary=None, decided=decided, champion=self.log.state().champion or BASE)
                continue
            pending = self.undecided()
            beat(
                pending=len(pending),
                decided=decided,
                champion=self.log.state().champion or BASE,
                evaluating=None,
            )
            for version in pending:
                if stop.is_set():
                    break
                beat(evaluating=version)
                entry = self.evaluate(version)
                decided += 1
                beat(
                    decided=decided,
                    champion=entry.state.champion or BASE,
                    evaluating=None,
                    last=entry.decision,
                )
                self.say(f"{version}: {entry.decision} (champion {entry.state.champion or BASE})")
            if not pending and self.settings.prefetch_champion and not stop.is_set() and self.prefetch():
                continue  # a slice of the champion done: look for a candidate before the next one
            stop.wait(self.settings.poll_interval_s)

    def prefetch(self) -> bool:
        """Sample one more slice of the champion ahead of its next comparison (see
        ``Evaluator.prefetch``), or once it is all sampled, load the drift KL's model
        (``Evaluator.warm_up``); whether anything was done. A failure is reported, not raised: the
        comparison samples what is missing itself."""
        champion_version = self.log.state().champion
        try:
            champion = self.store.verify(champion_version) if champion_version else None
            if not self.evaluator.champion_todo(champion):
                return self.evaluator.warm_up()
            self.evaluator.prefetch(champion, self.store.latest())
            return True
        except (HarnessError, GateError, StoreError, TamperedAdapter) as exc:
            self.say(f"measuring the champion ahead of its next comparison failed: {exc}")
            return False
