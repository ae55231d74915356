"""Data quality of session micro-batches, with great-expectations.

:func:`check_batch` turns a batch of ``Session`` or ``RewardedSession`` records
into one row of features per session and validates it against an expectation
suite: unique session ids, turn and token counts in range, one logprob per
completion token, finite logprobs in ``[min_logprob, 0]``, adapter versions
shaped ``vN`` and equal on every turn, finite rewards in ``[reward_min, reward_max]``.
``ratchet quality`` runs it on a sample of a topic; the learner runs it on each
micro-batch. A failing batch goes to ``dlq.v1`` with :func:`quarantine`, never
silently dropped.

great-expectations is imported on first use (it takes seconds); the context
and suite are built once per settings and reused.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import threading
from dataclasses import dataclass, field
from typing import Any

from ingest.contract import (
    ADAPTER_VERSION_PATTERN,
    MAX_SESSION_TOKENS,
    MAX_TURNS,
    AssistantTurn,
    DeadLetter,
    RewardedSession,
    Session,
)
from ingest.producer import Delivery, RecordProducer

ID_COLUMN = "session_id"


@dataclasses.dataclass(frozen=True)
class QualitySettings:
    kafka_bootstrap: str = "127.0.0.1:19092"  # Kafka bootstrap servers `ratchet quality` samples from
    mlflow_url: str = "http://127.0.0.1:15000"  # MLflow server for `ratchet quality --mlflow`
    quality_min_logprob: float = -100.0  # a behaviour logprob below this is treated as corrupt
    quality_reward_min: float = -10.0  # a sanity bound: rewards are sums of a few weighted components
    quality_reward_max: float = 10.0  # upper sanity bound of a reward
    quality_max_turns: int = MAX_TURNS  # turns of one session
    quality_max_tokens: int = MAX_SESSION_TOKENS  # prompt + completion tokens of one session
    quality_experiment: str = "ratchet-quality"  # MLflow experiment of the validation runs


@dataclass
class QualityReport:
    success: bool
    failures: list[str]  # one readable line per failed expectation, naming it and its column
    result: dict  # the great-expectations validation result (JSON)
    records: int = 0
    record_failures: dict[str, list[str]] = field(default_factory=dict)  # session id -> its failures

    def summary(self) -> str:
        head = f"{'PASSED' if self.success else 'FAILED'}: {self.records} records"
        stats = self.result.get("statistics") or {}
        if stats:
            head += f", {stats.get('successful_expectations')}/{stats.get('evaluated_expectations')} expectations met"
        return "\n".join([head, *(f"  - {f}" for f in self.failures)])


# --- features ------------------------------------------------------------------------


def session_features(record: Session | RewardedSession) -> dict[str, Any]:
    """One row of per-session features (works on unvalidated records too)."""
    session = record.session if isinstance(record, RewardedSession) else record
    turns = list(session.turns or [])
    assistant = [t for t in turns if isinstance(t, AssistantTurn)]
    logprobs = [lp for t in assistant for lp in (t.behaviour_logprobs or [])]
    version = session.policy.adapter_version if session.policy is not None else None
    return {
        ID_COLUMN: record.session_id,
        "tenant": record.tenant,
        "n_turns": len(turns),
        "n_assistant_turns": len(assistant),
        "prompt_tokens": sum(len(t.prompt_token_ids or []) for t in assistant),
        "completion_tokens": sum(len(t.completion_token_ids or []) for t in assistant),
        "logprobs_match_tokens": all(
            len(t.completion_token_ids or []) == len(t.behaviour_logprobs or []) for t in assistant
        ),
        "logprobs_finite": all(_finite(lp) for lp in logprobs),
        "min_logprob": min(logprobs) if logprobs else None,
        "max_logprob": max(logprobs) if logprobs else None,
        "adapter_version": version,
        "turn_versions_match_policy": all(t.adapter_version == version for t in assistant),
        "reward": float(record.reward) if isinstance(record, RewardedSession) else None,
        "reward_finite": not isinstance(record, RewardedSession) or _finite(record.reward),
    }


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


def features_frame(records: list[Session | RewardedSession]):
    import pandas as pd

    rows = [session_features(r) for r in records]
    frame = pd.DataFrame(rows)
    for column in ("min_logprob", "max_logprob", "reward"):
        frame[column] = frame[column].astype("float64")
    return frame


# --- the suite --------------------------------------------------------------------------


def expectations(settings: QualitySettings) -> list:
    import great_expectations.expectations as gxe

    lo = settings.quality_min_logprob
    return [
        gxe.ExpectColumnValuesToNotBeNull(column=ID_COLUMN),
        gxe.ExpectColumnValuesToBeOfType(column=ID_COLUMN, type_="str"),
        gxe.ExpectColumnValuesToBeUnique(column=ID_COLUMN),
        gxe.ExpectColumnValuesToBeBetween(
            column="n_turns", min_value=1, max_value=settings.quality_max_turns
        ),
        gxe.ExpectColumnValuesToBeBetween(column="n_assistant_turns", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(column="prompt_tokens", min_value=1),
        gxe.ExpectColumnValuesToBeBetween(
            column="completion_tokens", min_value=1, max_value=settings.quality_max_tokens
        ),
        gxe.ExpectColumnValuesToBeInSet(column="logprobs_match_tokens", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="logprobs_finite", value_set=[True]),
        gxe.ExpectColumnValuesToBeBetween(column="min_logprob", min_value=lo, max_value=0.0),
        gxe.ExpectColumnValuesToBeBetween(column="max_logprob", min_value=lo, max_value=0.0),
        gxe.ExpectColumnValuesToMatchRegex(column="adapter_version", regex=ADAPTER_VERSION_PATTERN),
        gxe.ExpectColumnValuesToBeInSet(column="turn_versions_match_policy", value_set=[True]),
        gxe.ExpectColumnValuesToBeInSet(column="reward_finite", value_set=[True]),
        gxe.ExpectColumnValuesToBeBetween(
            column="reward", min_value=settings.quality_reward_min, max_value=settings.quality_reward_max
        ),
    ]


class Checker:
    """An ephemeral great-expectations context with the session suite, built once."""

    def __init__(self, settings: QualitySettings):
        os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        self.context = gx.get_context(mode="ephemeral")
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        asset = self.context.data_sources.add_pandas("ratchet").add_dataframe_asset("sessions")
        batch = asset.add_batch_definition_whole_dataframe("micro-batch")
        suite = self.context.suites.add(gx.ExpectationSuite(name="sessions"))
        for expectation in expectations(settings):
            suite.add_expectation(expectation)
        self.validation = self.context.validation_definitions.add(
            gx.ValidationDefinition(name="sessions", data=batch, suite=suite)
        )
        self._lock = threading.Lock()

    def check(self, records: list[Session | RewardedSession]) -> QualityReport:
        if not records:
            return QualityReport(False, ["the batch is empty: nothing to validate"], {}, 0)
        frame = features_frame(records)
        result_format = {"result_format": "COMPLETE", "unexpected_index_column_names": [ID_COLUMN]}
        with self._lock:
            result = self.validation.run(batch_parameters={"dataframe": frame}, result_format=result_format)
        result_json = result.to_json_dict()
        failures, per_record = describe_failures(result_json)
        return QualityReport(bool(result_json["success"]), failures, result_json, len(records), per_record)


_checkers: dict[QualitySettings, Checker] = {}
_checkers_lock = threading.Lock()


def check_batch(
    records: list[Session | RewardedSession], settings: QualitySettings | None = None
) -> QualityReport:
    """Validate one batch of sessions; ``report.failures`` names each failed expectation."""
    settings = settings or QualitySettings()
    with _checkers_lock:
        if settings not in _checkers:
            _checkers[settings] = Checker(settings)
        checker = _checkers[settings]
    return checker.check(records)


def describe_failures(result: dict) -> tuple[list[str], dict[str, list[str]]]:
    """Readable lines for the failed expectations, and the failures of each session id."""
    failures: list[str] = []
    per_record: dict[str, list[str]] = {}
    for item in result.get("results", []):
        if item.get("success"):
            continue
        config = item["expectation_config"]
        kwargs = {k: v for k, v in config["kwargs"].items() if k not in ("batch_id", "column")}
        name = f"{config['type']}({config['kwargs'].get('column', 'table')})" + _args(kwargs)
        detail = item.get("result") or {}
        if item.get("exception_info", {}).get("raised_exception"):
            line = f"{name}: could not run: {item['exception_info'].get('exception_message')}"
        elif "unexpected_count" in detail:
            sample = detail.get("partial_unexpected_list", [])[:5]
            line = (
                f"{name}: {detail['unexpected_count']} of {detail['element_count']} "
                f"sessions unexpected, e.g. {[_plain(v) for v in sample]}"
            )
        else:
            line = f"{name}: observed {detail.get('observed_value')!r}"
        failures.append(line)
        for row in detail.get("unexpected_index_list") or []:
            sid = row.get(ID_COLUMN) if isinstance(row, dict) else None
            if sid is not None:
                reason = f"{name}: got {_plain(row.get(config['kwargs'].get('column')))!r}"
                if reason not in per_record.setdefault(str(sid), []):
                    per_record[str(sid)].append(reason)
    return failures, per_record


def _args(kwargs: dict) -> str:
    return " [" + ", ".join(f"{k}={v!r}" for k, v in kwargs.items()) + "]" if kwargs else ""


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


# --- what happens to a result -------------------------------------------------------


def log_to_mlflow(
    report: QualityReport, tracking_uri: str, run_name: str, experiment: str = "ratchet-quality"
) -> str:
    """Record a validation as an MLflow run (metrics + ``validation.json``); returns the run id."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        try:
            experiment_id = client.create_experiment(experiment)
        except MlflowException:  # created by another process meanwhile
            experiment_id = client.get_experiment_by_name(experiment).experiment_id
    else:
        experiment_id = found.experiment_id
    run = client.create_run(experiment_id, run_name=run_name, tags={"ratchet.stage": "quality"})
    run_id = run.info.run_id
    stats = report.result.get("statistics") or {}
    metrics = {
        "success": float(report.success),
        "records": float(report.records),
        "failed_expectations": float(len(report.failures)),
        "failed_records": float(len(report.record_failures)),
        "evaluated_expectations": float(stats.get("evaluated_expectations") or 0),
    }
    for key, value in metrics.items():
        client.log_metric(run_id, key, value)
    client.log_dict(run_id, report.result, "validation.json")
    client.log_text(run_id, report.summary(), "summary.txt")
    client.set_terminated(run_id, "FINISHED")
    return run_id


def quarantine(
    producer: RecordProducer, records: list[Session | RewardedSession], report: QualityReport, source: str
) -> list[Delivery]:
    """Dead-letter every record of a failed batch with its own failures (or the batch's) as reason."""
    batch_reason = "quarantined with its batch, which failed: " + "; ".join(report.failures)
    letters = []
    for record in records:
        own = report.record_failures.get(str(record.session_id))
        reason = "; ".join(own) if own else batch_reason
        payload = json.dumps(record.model_dump(mode="json", warnings=False))
        letter = DeadLetter.of(source, reason, payload, session_id=record.session_id, tenant=record.tenant)
        letters.append(producer.dead_letter(letter))
    return producer.produce(letters)
