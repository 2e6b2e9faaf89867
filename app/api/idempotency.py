"""`Idempotency-Key` for the create routes (submitAudit, uploadDataset, submitSweep); the rules are in
app.integrations.idempotency. `create_once` runs a route's create step at most once per key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import Header, Response
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.api.errors import ApiError
from app.config import Settings
from app.integrations import idempotency
from app.schemas.errors import FieldViolation

IdempotencyKeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        min_length=1,
        max_length=idempotency.MAX_KEY_LENGTH,
        description="Any unique string (a UUID): a retry with the same key and body returns the first "
        "answer instead of creating a second resource; the same key with another body is 422.",
    ),
]

Remember = Callable[[Session, str], None]
"""Called by the create step with its session and the new resource's id, before it commits."""


def _reused(exc: idempotency.KeyReused) -> ApiError:
    detail = [FieldViolation(path="header.Idempotency-Key", message=str(exc))]
    return ApiError(422, str(exc), detail, reason="IDEMPOTENCY_KEY_REUSED")


def create_once(
    *,
    session: Session,
    tenant_id: str,
    key: str | None,
    operation: str,
    body: Any,
    status_code: int,
    settings: Settings,
    response: Response,
    create: Callable[[Remember | None], str],
) -> str:
    """The id `create` made, or (a retry) the id the key's first request made, with the header
    `Idempotent-Replayed: true`. `create` must pass the new id to `remember` before it commits."""
    if key is None:
        return create(None)
    fp = idempotency.fingerprint(operation, body)

    def replayed() -> str | None:
        try:
            replay = idempotency.replay_of(
                session, tenant_id=tenant_id, key=key, operation=operation, fingerprint=fp
            )
        except idempotency.KeyReused as exc:
            raise _reused(exc) from exc
        if replay is None:
            return None
        response.headers[idempotency.REPLAYED_HEADER] = "true"
        return replay.resource_id

    done = replayed()  # the cheap path for a plain retry; the unique key below is the guarantee
    if done is not None:
        return done

    def remember(s: Session, resource_id: str) -> None:
        idempotency.record(
            s,
            tenant_id=tenant_id,
            key=key,
            operation=operation,
            fingerprint=fp,
            status_code=status_code,
            resource_id=resource_id,
            ttl_seconds=settings.idempotency_ttl_seconds,
        )

    try:
        return create(remember)
    except IntegrityError:
        session.rollback()  # a concurrent duplicate committed first: drop everything this one stored
        done = replayed()
        if done is None:
            raise
        return done
