"""The learner follows the ratchet: it trains on top of the champion, never on a line the gate left.

Each version the learner publishes names its parent (the version its weights
continued from). The learner's *head* is the version its current weights
descend from: the last version it published, or the champion it rebased on.
The gate decides versions one by one; the learner reads those decisions from
the MLflow registry (the ``champion`` alias and each version's
``gate.decision`` tag, both set by the gate from its decision log).

Walk from the head up its parents to the champion. Versions on the way that the
gate has not decided yet are candidates in flight: the line goes on. So do up
to ``keep_short`` rejected versions that only *fell short* (the gate found
them better than the champion by their mean gain, but not by the margin its
rule requires, and every other check passed: :func:`gating.rule.fell_short`):
a step too small for the gate to resolve is kept, so that the next
ones build on it instead of starting again from the champion. Any other
decided version on the way means the line left the ratchet: it was rejected,
or it was promoted and is no longer champion (rolled back, or replaced by
another line).
Then the learner *rebases*: it continues from the champion's weights and the
optimizer state it had when it published that version, and keeps the data it
has not trained on yet. A head whose ancestry never meets the champion (the
champion came from elsewhere) rebases too. The base model is the champion
when there is none, and every line meets it.

A promotion is written in steps: the gate tags the version with its decision,
then moves the alias. A reader between the two sees a promoted version below
the champion's alias on the head's line, exactly as after a rollback. Such a
departure (``Course.awaits_confirmation``) is acted on only when a later read
still shows it; a rejection, or a champion off the line, is acted on at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from learner.store import BASE  # the head (or champion) when it is the base model itself


@dataclass(frozen=True)
class GateView:
    champion: str | None  # None: the base model
    decided: frozenset[str]  # versions the gate (or a reviewer) has decided on
    promoted: frozenset[str] = frozenset()  # ... of them, those whose decision was to promote
    short: frozenset[str] = frozenset()  # ... those rejected only for falling short of the required gain


def ancestry(version: str | None, parent_of: Callable[[str], str | None]) -> dict[str | None, int]:
    """``version`` and the versions it descends from, nearest first, each with its steps from
    ``version``, down to the base model (``None``). A corrupt ancestry (a version met twice) ends the
    walk there, without the base model."""
    line: dict[str | None, int] = {}
    while version not in line:
        line[version] = len(line)
        if version is None:
            break
        version = parent_of(version)
    return line


def distance(
    version: str | None, head_line: Mapping[str | None, int], parent_of: Callable[[str], str | None]
) -> int:
    """The steps in the lineage tree between ``version`` and the head whose :func:`ancestry` is
    ``head_line``: up from ``version`` to where it meets the head's line, then up that line from the
    head. A walk that never meets it (a corrupt ancestry) counts the whole of the head's line."""
    steps, seen = 0, set()
    while version not in head_line and version not in seen and version is not None:
        seen.add(version)
        version, steps = parent_of(version), steps + 1
    return steps + head_line.get(version, len(head_line))


@dataclass(frozen=True)
class Course:
    """Where the head's line stands, from one walk up its ancestry (:func:`course`)."""

    left_at: str | None  # the decided version where the line left, BASE if it never meets the champion
    target: str | None  # the champion to rebase on (BASE: the base model), None to go on from the head
    kept: tuple[str, ...] = ()  # when the line goes on: the versions on it that fell short, nearest first
    awaits_confirmation: bool = False  # the departure may be a promotion caught half-written


def course(head: str, parent_of: Callable[[str], str | None], view: GateView, keep_short: int = 0) -> Course:
    """The line goes on when the head descends from the champion through undecided versions and at
    most ``keep_short`` versions that fell short; otherwise it left at the first other decided version
    (or never meets the champion), and the learner rebases on the champion. The departure awaits
    confirmation when the version it left at was promoted and descends from the champion (its alias
    not moved yet, or a rollback)."""
    champion = None if view.champion in (None, BASE) else view.champion
    kept: list[str] = []
    left_at: str | None = BASE  # unless the walk meets the champion or a decided version
    for version in ancestry(None if head == BASE else head, parent_of):
        if version == champion:
            return Course(None, None, tuple(kept))
        if version in view.short and len(kept) < keep_short:
            kept.append(version)
        elif version in view.decided:
            left_at = version
            break
    awaits = left_at in view.promoted and champion in ancestry(left_at, parent_of)
    return Course(left_at, view.champion or BASE, awaits_confirmation=awaits)


def read_gate(mlflow_url: str, registered_model: str) -> GateView:
    """The gate's decisions as the MLflow registry holds them (no registered model: nothing decided)."""
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

    from gating.records import ACTION, DECISION, REASON_CODES, TARGET_GAIN
    from gating.rule import fell_short
    from serving.champion import TAG, champion_version

    client = MlflowClient(mlflow_url, mlflow_url)
    champion = champion_version(client, registered_model)
    if champion is None:
        try:
            client.get_registered_model(registered_model)
        except MlflowException as exc:
            if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
                return GateView(None, frozenset())
            raise
    found = client.search_model_versions(f"name = '{registered_model}'")
    tags = {v.tags[TAG]: v.tags for v in found if v.tags.get(DECISION) and v.tags.get(TAG)}
    short = {
        version
        for version, t in tags.items()
        if (t[DECISION], t.get(ACTION)) == ("reject", "evaluate")
        and fell_short(filter(None, t.get(REASON_CODES, "").split(",")), _number(t.get(TARGET_GAIN)))
    }
    promoted = {version for version, t in tags.items() if t[DECISION] == "promote"}
    return GateView(champion, frozenset(tags), frozenset(promoted), frozenset(short))


def _number(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None
