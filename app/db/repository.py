"""Every query the service makes. Tenant-facing functions take `tenant_id` and filter through `_owned`,
the one place where tenant scoping happens: another tenant's id is simply not found.

Runner-facing functions (`claim_audit`, `record_progress`, `finish_audit`, …) address an audit by id and
the `attempt` they claimed; a write from an attempt that lost its claim changes nothing.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, and_, delete, func, or_, select, update
from sqlalchemy.orm import Session

from app.db.models import (
    TERMINAL_STATES,
    ApiKey,
    Audit,
    AuditState,
    Tenant,
    UploadedDataset,
    utcnow,
)

Owned = TypeVar("Owned", Audit, UploadedDataset)

KEY_PREFIX = "ica"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1, "dklen": 32}
# key id → sha256 of a key that passed scrypt in this process: spares the ~50 ms scrypt on every request.
# The row is still read each time, so revocation takes effect at once.
_verified: dict[str, bytes] = {}
_VERIFIED_MAX = 4096


class InvalidPageToken(ValueError):
    """A page token that this service did not issue."""


# --- tenants and keys -------------------------------------------------------------------------------


def get_or_create_tenant(session: Session, name: str) -> Tenant:
    tenant = session.scalar(select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(name=name)
        session.add(tenant)
        session.flush()
    return tenant


def _hash_secret(secret: str, salt: bytes) -> bytes:
    return hashlib.scrypt(secret.encode(), salt=salt, **_SCRYPT)


def create_api_key(session: Session, tenant_name: str) -> tuple[ApiKey, str]:
    """A new key for the tenant (created if new). Returns the row and the full key, which is never stored."""
    tenant = get_or_create_tenant(session, tenant_name)
    key_id = secrets.token_hex(6)
    secret = secrets.token_urlsafe(32)
    salt = secrets.token_bytes(16)
    row = ApiKey(id=key_id, tenant_id=tenant.id, salt=salt, secret_hash=_hash_secret(secret, salt))
    session.add(row)
    session.flush()
    return row, f"{KEY_PREFIX}_{key_id}_{secret}"


def revoke_api_key(session: Session, key_id: str) -> bool:
    """Revoke by key id (the part after `ica_`); False if no such live key."""
    result = session.execute(
        update(ApiKey).where(ApiKey.id == key_id, ApiKey.revoked_at.is_(None)).values(revoked_at=utcnow())
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def parse_api_key(key: str) -> tuple[str, str] | None:
    prefix, _, rest = key.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != KEY_PREFIX or not key_id or not secret:
        return None
    return key_id, secret


def authenticate(session: Session, key: str) -> Tenant | None:
    """The tenant owning a live key, or None. Constant-time comparison of scrypt(secret, salt) hashes."""
    parsed = parse_api_key(key)
    if parsed is None:
        return None
    key_id, secret = parsed
    row = session.get(ApiKey, key_id)
    if row is None or row.revoked_at is not None:
        return None
    digest = hashlib.sha256(key.encode()).digest()
    if not hmac.compare_digest(_verified.get(key_id, b""), digest):
        if not hmac.compare_digest(row.secret_hash, _hash_secret(secret, row.salt)):
            return None
        _verified[key_id] = digest
        while len(_verified) > _VERIFIED_MAX:
            _verified.pop(next(iter(_verified)))
    return session.get(Tenant, row.tenant_id)


# --- tenant-scoped reads ----------------------------------------------------------------------------


def _owned(model: type[Owned], tenant_id: str) -> Select[tuple[Owned]]:
    """THE tenant filter: every tenant-facing query starts here."""
    return select(model).where(model.tenant_id == tenant_id)


def get_audit(session: Session, *, tenant_id: str, audit_id: str) -> Audit | None:
    return session.scalar(_owned(Audit, tenant_id).where(Audit.id == audit_id))


def add_audit(session: Session, *, tenant_id: str, kind: str, request: dict[str, Any]) -> Audit:
    audit = Audit(tenant_id=tenant_id, kind=kind, request=request, state=AuditState.PENDING)
    session.add(audit)
    session.flush()
    return audit


@dataclass(frozen=True)
class Page:
    items: Sequence[Any]
    next_page_token: str | None


def encode_page_token(created_at: datetime, row_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_page_token(token: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        created_at, row_id = json.loads(raw)
        return datetime.fromisoformat(created_at), str(row_id)
    except (binascii.Error, ValueError, TypeError) as exc:
        raise InvalidPageToken("page_token is not a token returned by this service") from exc


def _keyset_page(
    session: Session, query: Select[Any], model: Any, page_size: int, page_token: str | None
) -> Page:
    """Newest first; the token is the (created_at, id) of the last row shown (keyset pagination)."""
    if page_token:
        created_at, row_id = decode_page_token(page_token)
        query = query.where(
            or_(model.created_at < created_at, and_(model.created_at == created_at, model.id < row_id))
        )
    rows = list(
        session.scalars(query.order_by(model.created_at.desc(), model.id.desc()).limit(page_size + 1))
    )
    token = (
        encode_page_token(rows[page_size - 1].created_at, rows[page_size - 1].id)
        if len(rows) > page_size
        else None
    )
    return Page(items=rows[:page_size], next_page_token=token)


def list_audits(
    session: Session,
    *,
    tenant_id: str,
    state: str | None = None,
    kind: str | None = None,
    page_size: int = 50,
    page_token: str | None = None,
) -> Page:
    query = _owned(Audit, tenant_id)
    if state:
        query = query.where(Audit.state == state)
    if kind:
        query = query.where(Audit.kind == kind)
    return _keyset_page(session, query, Audit, page_size, page_token)


def request_cancel(session: Session, *, tenant_id: str, audit_id: str) -> Audit | None:
    """PENDING → CANCELLED at once; RUNNING → the flag the runner checks between batches. None if not found."""
    audit = get_audit(session, tenant_id=tenant_id, audit_id=audit_id)
    if audit is None:
        return None
    now = utcnow()
    session.execute(
        update(Audit)
        .where(Audit.id == audit_id, Audit.state == AuditState.PENDING)
        .values(
            state=AuditState.CANCELLED, cancel_requested=True, finished_at=now, progress_stage="cancelled"
        )
    )
    session.execute(
        update(Audit)
        .where(Audit.id == audit_id, Audit.state == AuditState.RUNNING)
        .values(cancel_requested=True)
    )
    session.refresh(audit)
    return audit


# --- datasets ---------------------------------------------------------------------------------------


def add_dataset(session: Session, *, tenant_id: str, **fields: Any) -> UploadedDataset:
    row = UploadedDataset(tenant_id=tenant_id, **fields)
    session.add(row)
    session.flush()
    return row


def get_dataset(session: Session, *, tenant_id: str, dataset_id: str) -> UploadedDataset | None:
    return session.scalar(_owned(UploadedDataset, tenant_id).where(UploadedDataset.id == dataset_id))


def list_datasets(
    session: Session, *, tenant_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    return _keyset_page(session, _owned(UploadedDataset, tenant_id), UploadedDataset, page_size, page_token)


def delete_dataset(session: Session, *, tenant_id: str, dataset_id: str) -> bool:
    result = session.execute(
        delete(UploadedDataset).where(
            UploadedDataset.tenant_id == tenant_id, UploadedDataset.id == dataset_id
        )
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


# --- runner side (by id and attempt) ------------------------------------------------------------------


def claim_audit(session: Session, *, audit_id: str, stale_before: datetime) -> int | None:
    """Conditional UPDATE: PENDING, or RUNNING with a heartbeat older than `stale_before`, → RUNNING with
    attempt+1. Returns the new attempt number, or None when another worker holds it or it is finished."""
    now = utcnow()
    result = session.execute(
        update(Audit)
        .where(
            Audit.id == audit_id,
            Audit.cancel_requested.is_(False),
            or_(
                Audit.state == AuditState.PENDING,
                and_(Audit.state == AuditState.RUNNING, Audit.heartbeat_at < stale_before),
            ),
        )
        .values(
            state=AuditState.RUNNING,
            attempt=Audit.attempt + 1,
            started_at=now,
            heartbeat_at=now,
            progress_stage="starting",
            progress_fraction=0.0,
            progress_eta_seconds=None,
            progress_message="",
        )
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return None
    return session.scalar(select(Audit.attempt).where(Audit.id == audit_id))


def _mine(audit_id: str, attempt: int) -> Any:
    return and_(Audit.id == audit_id, Audit.attempt == attempt, Audit.state == AuditState.RUNNING)


def record_progress(
    session: Session,
    *,
    audit_id: str,
    attempt: int,
    stage: str,
    fraction: float,
    eta_seconds: float | None,
    message: str,
) -> bool:
    """Write progress and the heartbeat; False when this attempt no longer holds the audit."""
    result = session.execute(
        update(Audit)
        .where(_mine(audit_id, attempt))
        .values(
            progress_stage=stage[:200],
            progress_fraction=fraction,
            progress_eta_seconds=eta_seconds,
            progress_message=message,
            heartbeat_at=utcnow(),
        )
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def heartbeat(session: Session, *, audit_id: str, attempt: int) -> bool:
    result = session.execute(
        update(Audit)
        .where(_mine(audit_id, attempt))
        .values(heartbeat_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def cancel_requested(session: Session, *, audit_id: str) -> bool:
    return bool(session.scalar(select(Audit.cancel_requested).where(Audit.id == audit_id)))


def finish_audit(
    session: Session,
    *,
    audit_id: str,
    attempt: int,
    state: AuditState,
    result: dict[str, Any] | None = None,
    error: dict[str, Any] | None = None,
    stage: str | None = None,
) -> bool:
    """RUNNING → a terminal state, only for the attempt that holds the claim (a re-run writes once)."""
    if state not in TERMINAL_STATES:
        raise ValueError(f"{state} is not terminal")
    values: dict[str, Any] = {"state": state, "result": result, "error": error, "finished_at": utcnow()}
    if state == AuditState.SUCCEEDED:
        values |= {"progress_fraction": 1.0, "progress_eta_seconds": 0.0}
    values["progress_stage"] = stage or state.lower()
    res = session.execute(
        update(Audit)
        .where(_mine(audit_id, attempt))
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return res.rowcount == 1  # type: ignore[attr-defined]


def audits_to_requeue(session: Session, *, stale_before: datetime, limit: int = 100) -> list[str]:
    """Ids the sweep re-enqueues: PENDING not enqueued since `stale_before`, RUNNING with a stale heartbeat
    (its worker died) and not re-enqueued since. Stale RUNNING audits whose cancel was asked end CANCELLED."""
    now = utcnow()
    session.execute(
        update(Audit)
        .where(
            Audit.state == AuditState.RUNNING,
            Audit.cancel_requested.is_(True),
            Audit.heartbeat_at < stale_before,
        )
        .values(state=AuditState.CANCELLED, finished_at=now, progress_stage="cancelled")
        .execution_options(synchronize_session=False)
    )
    not_recently_enqueued = or_(Audit.enqueued_at.is_(None), Audit.enqueued_at < stale_before)
    query = (
        select(Audit.id)
        .where(
            not_recently_enqueued,
            or_(
                Audit.state == AuditState.PENDING,
                and_(Audit.state == AuditState.RUNNING, Audit.heartbeat_at < stale_before),
            ),
        )
        .order_by(Audit.created_at)
        .limit(limit)
    )
    return list(session.scalars(query))


def mark_enqueued(session: Session, audit_ids: Sequence[str]) -> None:
    if audit_ids:
        session.execute(
            update(Audit)
            .where(Audit.id.in_(list(audit_ids)))
            .values(enqueued_at=utcnow())
            .execution_options(synchronize_session=False)
        )


def stale_cutoff(stale_after_seconds: float) -> datetime:
    return utcnow() - timedelta(seconds=stale_after_seconds)


# -- operator views (all tenants; never exposed per tenant) -----------------------------------------


def audit_counts(session: Session) -> list[tuple[str, str, int]]:
    """(kind, state, count) over every tenant, for the operator's /metrics."""
    rows = session.execute(select(Audit.kind, Audit.state, func.count()).group_by(Audit.kind, Audit.state))
    return [(kind, state, int(count)) for kind, state, count in rows]


def oldest_pending_created_at(session: Session) -> datetime | None:
    """When the longest-waiting PENDING audit was submitted (queue lag), or None."""
    return session.scalar(select(func.min(Audit.created_at)).where(Audit.state == AuditState.PENDING))
