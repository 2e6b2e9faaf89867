"""Read-only queries behind cheap polling: an audit's *mark* (the few columns its representation changes
with, hashed into its ETag by app.api.watch) and the summary view of `GET /v1/audits` (no request body,
no result; the claimed ε extracted in SQL).

The mark is state, progress, attempt, the cancel flag and the start/finish times: the request never
changes and the result and error are written together with the terminal state and `finished_at`, so two
reads with equal marks have equal representations.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Row, bindparam, func, select
from sqlalchemy.orm import Session

from app.db.audits import filtered
from app.db.constants import CLAIM_FIELDS
from app.db.models import Audit
from app.db.scoping import Page, keyset_page

MARK_FIELDS = (
    "state",
    "progress_stage",
    "progress_fraction",
    "progress_eta_seconds",
    "progress_message",
    "attempt",
    "cancel_requested",
    "started_at",
    "finished_at",
)

_MARK = [getattr(Audit, name) for name in MARK_FIELDS]
_CLAIMED = func.coalesce(*(Audit.request[name].as_float() for name in CLAIM_FIELDS)).label("epsilon_claimed")
_SUMMARY = [
    Audit.id,
    Audit.kind,
    *_MARK,
    Audit.error,
    Audit.result,
    Audit.created_at,
    Audit.heartbeat_at,
    Audit.follows,
    Audit.followed_by,
    _CLAIMED,
]
_MARK_CHUNK = 500
# Built once: a poll's read is then a cache hit with two bound values (building the statement per
# request cost as much as running it).
_ONE = (Audit.tenant_id == bindparam("tenant_id"), Audit.id == bindparam("audit_id"))
_GET_MARK = select(Audit.id, *_MARK).where(*_ONE)
_GET_SUMMARY = select(*_SUMMARY).where(*_ONE)


def get_mark(session: Session, *, tenant_id: str, audit_id: str) -> Row[Any] | None:
    """The caller's audit's mark (and id), or None when it is not theirs."""
    return session.execute(_GET_MARK, {"tenant_id": tenant_id, "audit_id": audit_id}).first()


def marks(session: Session, audit_ids: Sequence[str]) -> dict[str, Row[Any]]:
    """The marks of many audits by id, in one query per 500 ids (the long-poll hub's re-check; the ids
    were checked against the caller's tenant when they were registered)."""
    found: dict[str, Row[Any]] = {}
    ids = list(audit_ids)
    for start in range(0, len(ids), _MARK_CHUNK):
        chunk = ids[start : start + _MARK_CHUNK]
        for row in session.execute(select(Audit.id, *_MARK).where(Audit.id.in_(chunk))):
            found[row.id] = row
    return found


def get_summary(session: Session, *, tenant_id: str, audit_id: str) -> Row[Any] | None:
    """The caller's audit as the summary view's columns, or None when it is not theirs."""
    return session.execute(_GET_SUMMARY, {"tenant_id": tenant_id, "audit_id": audit_id}).first()


def summary_page(
    session: Session,
    *,
    tenant_id: str,
    state: str | None = None,
    kind: str | None = None,
    page_size: int = 50,
    page_token: str | None = None,
    where: Sequence[Any] = (),
    verdict: str | None = None,
) -> Page:
    """`audits.list_audits` without the request bodies: the same filters, order and page tokens; `where`:
    further conditions on `Audit` (e.g. labels); `verdict`: only audits whose result has that verdict."""
    query = select(*_SUMMARY).where(Audit.tenant_id == tenant_id, *where)
    query = filtered(query, state=state, kind=kind, verdict=verdict)
    return keyset_page(session, query, Audit, page_size, page_token, scalars=False)
