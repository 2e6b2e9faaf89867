"""The `Idempotency-Key` header (IETF httpapi draft "The Idempotency-Key HTTP Header Field"), as payment
APIs do it: the first request with a key stores its resource and the key in ONE transaction; a retry with
the same key and the same body gets that resource back with the original status code; the same key with
another body is 422; a key expires after ICLAUDIT_IDEMPOTENCY_TTL_SECONDS.

Concurrent duplicates: the key's row has a unique (tenant, key) primary key, so of N racing requests one
commits and the others' INSERT fails (PostgreSQL blocks on the uncommitted row, SQLite serialises
writers); those roll back everything they stored and answer the winner's resource.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy.orm import Session

from app.db import idempotency as store
from app.db.models import IdempotencyKey, utcnow

REPLAYED_HEADER = "Idempotent-Replayed"
MAX_KEY_LENGTH = 255


class KeyReused(Exception):
    """The key was first used with another body (or another operation)."""


@dataclass(frozen=True)
class Replay:
    status_code: int
    resource_id: str


def fingerprint(operation: str, body: Any) -> str:
    """sha256 of the operation and its parsed body as canonical JSON (key order and spacing ignored)."""
    canonical = json.dumps([operation, body], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def record(
    session: Session,
    *,
    tenant_id: str,
    key: str,
    operation: str,
    fingerprint: str,
    status_code: int,
    resource_id: str,
    ttl_seconds: float,
) -> None:
    """Store the key beside the new resource, in the caller's transaction; IntegrityError if it is taken."""
    now = utcnow()
    store.drop_expired_key(session, tenant_id=tenant_id, key=key, now=now)
    store.insert_key(
        session,
        IdempotencyKey(
            tenant_id=tenant_id,
            key=key,
            operation=operation,
            fingerprint=fingerprint,
            status_code=status_code,
            resource_id=resource_id,
            created_at=now,
            expires_at=now + timedelta(seconds=ttl_seconds),
        ),
    )


def replay_of(
    session: Session, *, tenant_id: str, key: str, operation: str, fingerprint: str
) -> Replay | None:
    """The stored answer for a key another request committed; None if there is none (or it expired)."""
    row = store.get_key(session, tenant_id=tenant_id, key=key)
    if row is None or row.expires_at <= utcnow():
        return None
    if row.operation != operation or row.fingerprint != fingerprint:
        raise KeyReused(
            f"Idempotency-Key {key!r} was first used with a different request body"
            + ("" if row.operation == operation else f" ({row.operation})")
            + "; send a new key for a new request."
        )
    return Replay(status_code=row.status_code, resource_id=row.resource_id)
