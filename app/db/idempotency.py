"""Idempotency keys: one row per (tenant, key), its primary key the unique constraint that lets only one of
several concurrent duplicates commit (the others' INSERT fails once the first commits)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from app.db.models import IdempotencyKey


def drop_expired_key(session: Session, *, tenant_id: str, key: str, now: datetime) -> None:
    session.execute(
        delete(IdempotencyKey).where(
            IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key, IdempotencyKey.expires_at <= now
        )
    )


def insert_key(session: Session, row: IdempotencyKey) -> None:
    """Flushes at once: raises IntegrityError when the tenant already holds the key."""
    session.add(row)
    session.flush()


def get_key(session: Session, *, tenant_id: str, key: str) -> IdempotencyKey | None:
    return session.scalar(
        select(IdempotencyKey).where(IdempotencyKey.tenant_id == tenant_id, IdempotencyKey.key == key)
    )


def purge_expired_keys(session: Session, *, now: datetime) -> int:
    """Delete the expired keys; a DELETE only when there are some (a write ends this process's kept poll
    answers, app.jobs.writes): with none expired it only reads."""
    expired = IdempotencyKey.expires_at <= now
    if not session.scalar(select(exists().where(expired))):
        return 0
    result = session.execute(delete(IdempotencyKey).where(expired))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]
