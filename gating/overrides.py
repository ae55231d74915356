"""A reviewer's decisions by hand: approve, reject or roll back a version, with a reason and a name.

They are recorded exactly like the gate's own (MLflow run, registry version,
decision log entry, aliases); this module says what a valid one is.
"""

from __future__ import annotations

import re

from gating.decisions import BASE, LogError
from learner.store import version_number

ACTOR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
OVERRIDES = ("approve", "reject", "rollback")


def check(action: str, version: str, reason: str, actor: str) -> tuple[str, list[dict[str, str]]]:
    """The (decision, reasons) an override records; LogError saying what to fix when it is not valid."""
    if action not in OVERRIDES:
        raise LogError(f"unknown action {action!r}; use one of {', '.join(OVERRIDES)}")
    if not reason.strip():
        raise LogError("a reason is required")
    if not ACTOR_RE.match(actor):
        raise LogError(f"--by must name a person (letters, digits, . _ @ -), got {actor!r}")
    if version == BASE:
        if action != "rollback":
            raise LogError("only rollback takes 'base' (the base model without an adapter)")
    else:
        version_number(version)
    decision = "reject" if action == "reject" else "promote"
    return decision, [{"code": f"manual:{action}", "message": reason}]
