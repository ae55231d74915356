"""Bearer tokens per tenant: one check for the ingest API and the capture proxy.

Both read the same setting, ``ingest_tokens`` (``RATCHET_INGEST_TOKENS="acme=s3cret,beta=0ther"``):
tenant -> bearer token. A request sends ``Authorization: Bearer <token>`` (what an OpenAI
client sends for its ``api_key``) and the token names its tenant.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping


class Unauthorized(Exception):
    """No bearer token, or one no tenant has: answer 401 with ``detail`` and ``headers``."""

    def __init__(self, detail: str, challenge: str = "Bearer"):
        super().__init__(detail)
        self.detail = detail
        self.headers = {"WWW-Authenticate": challenge}


def check_tokens(tokens: Mapping[str, str]) -> None:
    """Raise ``ValueError`` unless every tenant has its own, non-empty token."""
    empty = sorted(tenant for tenant, token in tokens.items() if not token.strip())
    if empty:
        raise ValueError(f"tenants {empty} have an empty token")
    seen: dict[str, str] = {}
    for tenant, token in tokens.items():
        if token in seen:
            raise ValueError(f"tenants {seen[token]!r} and {tenant!r} have the same token")
        seen[token] = tenant


def tenant_of(authorization: str | None, tokens: Mapping[str, str]) -> str:
    """The tenant whose token the ``Authorization`` header carries; else :class:`Unauthorized`."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing bearer token (send Authorization: Bearer <your tenant's token>)")
    found = None
    for tenant, expected in tokens.items():  # every token compared, in constant time each
        if hmac.compare_digest(token.encode(), expected.encode()):
            found = tenant
    if found is None:
        raise Unauthorized("unknown token", 'Bearer error="invalid_token"')
    return found
