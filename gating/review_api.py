"""Manual review over HTTP: the same overrides as ``ratchet gate approve|reject|rollback``.

    POST /v1/gate/approve   {"version": "v7", "reason": "...", "by": "alice"}
    POST /v1/gate/reject    {"version": "v7", "reason": "...", "by": "alice"}
    POST /v1/gate/rollback  {"version": "v5" | "base", "reason": "...", "by": "alice"}
    GET  /v1/gate/state     champion and challenger (from the decision log)
    GET  /v1/gate/log       decision history, oldest first (``?limit=N`` for the last N)
    GET  /health

Every ``/v1/gate`` route needs ``Authorization: Bearer <review_token>``; the
server refuses to start without a token. An override is recorded exactly like
a gate decision: MLflow run, decision log entry, aliases.
"""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, FastAPI, Header, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field

from gating.decisions import DecisionLog, LogError
from gating.settings import GateSettings
from learner.store import StoreError, TamperedAdapter


class OverrideRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    version: str = Field(min_length=1, max_length=32)
    reason: str = Field(min_length=1, max_length=2000)
    by: str = Field(min_length=1, max_length=64)


def create_app(settings: GateSettings, gate_factory=None) -> FastAPI:
    """The review app; ``gate_factory`` builds the :class:`gating.gate.Gate` that applies overrides."""
    if not settings.review_token:
        raise ValueError("the review API needs a bearer token: set RATCHET_REVIEW_TOKEN")
    if gate_factory is None:
        from gating.gate import Gate

        def gate_factory():
            return Gate(settings)

    app = FastAPI(title="Ratchet gate review", version="1")
    log = DecisionLog(settings.decision_log_path)

    def authorised(authorization: Annotated[str | None, Header()] = None) -> None:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            token.encode(), settings.review_token.encode()
        ):
            raise HTTPException(401, "missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"})

    @app.get("/health")
    def health() -> dict:
        return {"ok": True}

    @app.get("/v1/gate/state", dependencies=[Depends(authorised)])
    def state() -> dict:
        current = log.state()
        return {"champion": current.champion or "base", "challenger": current.challenger}

    @app.get("/v1/gate/log", dependencies=[Depends(authorised)])
    def history(limit: Annotated[int, Query(ge=1, le=10_000)] = 100) -> list[dict]:
        return [e.to_json() for e in log.entries()[-limit:]]

    @app.post("/v1/gate/{action}", dependencies=[Depends(authorised)])
    def override(action: str, body: OverrideRequest) -> dict:
        if action not in ("approve", "reject", "rollback"):
            raise HTTPException(404, f"no action {action!r}; use approve, reject or rollback")
        gate = gate_factory()
        try:
            entry = gate.override(action, body.version, body.reason, body.by)
        except TamperedAdapter as exc:
            raise HTTPException(409, str(exc)) from None
        except StoreError as exc:
            status = 404 if "not in the store" in str(exc) else 400
            raise HTTPException(status, str(exc)) from None
        except LogError as exc:
            raise HTTPException(409 if "never champion" in str(exc) else 400, str(exc)) from None
        finally:
            gate.close()
        return entry.to_json()

    return app
