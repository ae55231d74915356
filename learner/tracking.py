"""MLflow records of the learner: one run per publishing window (experiment ``ratchet-learner``).

A window runs from the first update after a published version to the next
publish. Its run holds the settings as params, the loss components per update
(step = update number) and, when the window closes, the staleness histogram,
the skip counts and the published version as a tag. Without a tracking URL
nothing is logged.
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

    def open(self, run_id: str | None, params: dict[str, Any], tags: dict[str, str]) -> str | None:
        """The window's run: ``run_id`` when resuming after a restart, else a new one."""
        if self.client is None:
            return None
        if run_id is not None:
            return run_id
        run = self.client.create_run(self.experiment_id, tags=tags, run_name=tags.get("window"))
        from mlflow.entities import Param

        self.client.log_batch(
            run.info.run_id, params=[Param(k, str(v)[:500]) for k, v in sorted(params.items())]
        )
        return run.info.run_id

    def log(self, run_id: str | None, step: int, metrics: dict[str, float]) -> None:
        if self.client is None or run_id is None:
            return
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        self.client.log_batch(
            run_id, metrics=[Metric(k, float(v), now, step) for k, v in sorted(metrics.items())]
        )

    def close(self, run_id: str | None, step: int, metrics: dict[str, float], tags: dict[str, str]) -> None:
        if self.client is None or run_id is None:
            return
        self.log(run_id, step, metrics)
        for key, value in tags.items():
            self.client.set_tag(run_id, key, value)
        self.client.set_terminated(run_id, "FINISHED")
