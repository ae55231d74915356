"""Which sessions of a micro-batch the data-quality suite quarantines (no I/O).

The suite (:func:`ingest.quality.check_batch`) runs on the latest revision of
each session in the batch. When the batch fails, only the sessions that fail
are quarantined: the rows great-expectations names as unexpected, then, if the
others still fail together, each of those checked alone; a batch that fails as
a whole only (a table-level expectation) is quarantined whole.
"""

from __future__ import annotations

from ingest.contract import RewardedSession
from ingest.quality import QualityReport, QualitySettings, check_batch


def latest_revisions(sessions: list[RewardedSession]) -> dict[str, RewardedSession]:
    """Each session's latest revision among ``sessions``, by session id."""
    latest: dict[str, RewardedSession] = {}
    for rs in sessions:
        if rs.session_id not in latest or rs.revision > latest[rs.session_id].revision:
            latest[rs.session_id] = rs
    return latest


def failing(
    latest: dict[str, RewardedSession], report: QualityReport, settings: QualitySettings | None
) -> dict[str, list[str]]:
    """The sessions of a failed batch (``report`` on ``latest``) that fail, with their failures."""
    reasons = {sid: list(r) for sid, r in report.record_failures.items() if sid in latest}
    rest = [rs for sid, rs in latest.items() if sid not in reasons]
    if rest and (not reasons or not check_batch(rest, settings).success):
        for rs in rest:
            own = check_batch([rs], settings)
            if not own.success:
                reasons[rs.session_id] = own.record_failures.get(rs.session_id) or own.failures
    if not reasons:  # the batch fails as a whole only (a table-level expectation): all of it
        why = "quarantined with its batch, which failed: " + "; ".join(report.failures)
        reasons = {sid: [why] for sid in latest}
    return reasons
