"""MLflow records of the learner: one run per publishing window (experiment ``ratchet-learner``).

A window runs from the first update after a published version to the next
publish. Its run holds the settings as params, the loss components per update
(step = update number) and, when the window closes, the staleness histogram,
the skip counts and the published version as a tag. Without a tracking URL
nothing is logged.

Every write is idempotent, so the learner can repeat the last one after a crash:
a window's run is looked up by its ``window_key`` tag before one is created, and
metrics carry the update number as step and a timestamp from the checkpoint
(MLflow stores an identical metric once).
"""

from __future__ import annotations

import time
from typing import Any


class WindowTracker:
    def __init__(self, url: str | None, experiment: str):
        self.client = None
        self.experiment_id: str | None = None
        if url:
            from mlflow.tracking import MlflowClient

            self.client = MlflowClient(tracking_uri=url)
            found = self.client.get_experiment_by_name(experiment)
            self.experiment_id = found.experiment_id if found else self.client.create_experiment(experiment)

    def open(self, key: str, params: dict[str, Any], tags: dict[str, str]) -> str | None:
        """The window's run: the run already tagged ``window_key=key`` (made before a crash), else a
        new one. Params are logged each time (the same values again are accepted)."""
        if self.client is None:
            return None
        from mlflow.entities import Param

        found = self.client.search_runs([self.experiment_id], f"tags.window_key = '{key}'", max_results=2)
        if found:
            run_id = found[0].info.run_id
        else:
            run = self.client.create_run(
                self.experiment_id, tags={**tags, "window_key": key}, run_name=tags.get("window")
            )
            run_id = run.info.run_id
        self.client.log_batch(run_id, params=[Param(k, str(v)[:500]) for k, v in sorted(params.items())])
        return run_id

    def log(self, run_id: str | None, step: int, metrics: dict[str, float], timestamp_ms: int) -> None:
        """Metrics at ``step`` with a given timestamp: logging the same record twice keeps one."""
        if self.client is None or run_id is None:
            return
        from mlflow.entities import Metric

        self.client.log_batch(
            run_id, metrics=[Metric(k, float(v), timestamp_ms, step) for k, v in sorted(metrics.items())]
        )

    def close(
        self,
        run_id: str | None,
        step: int,
        metrics: dict[str, float],
        tags: dict[str, str],
        timestamp_ms: int | None,
    ) -> None:
        if self.client is None or run_id is None:
            return
        self.log(run_id, step, metrics, timestamp_ms if timestamp_ms is not None else int(time.time() * 1000))
        for key, value in tags.items():
            self.client.set_tag(run_id, key, value)
        self.client.set_terminated(run_id, "FINISHED")
