"""Sweeps and their children (one audit per grid point and seed), tenant-scoped through `scoping.owned`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from app.db.models import TERMINAL_STATES, Audit, Sweep, SweepChild, utcnow
from app.db.scoping import Page, keyset_page, owned


def add_sweep(session: Session, **fields: Any) -> Sweep:
    sweep = Sweep(**fields)
    session.add(sweep)
    session.flush()
    return sweep


def add_child(session: Session, **fields: Any) -> None:
    session.add(SweepChild(**fields))


def get_sweep(session: Session, *, tenant_id: str, sweep_id: str) -> Sweep | None:
    return session.scalar(owned(Sweep, tenant_id).where(Sweep.id == sweep_id))


def list_sweeps(
    session: Session, *, tenant_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    return keyset_page(session, owned(Sweep, tenant_id), Sweep, page_size, page_token)


def children(session: Session, *, sweep_id: str) -> list[tuple[SweepChild, Audit]]:
    """The sweep's children in grid order, each with its audit."""
    rows = session.execute(
        select(SweepChild, Audit)
        .join(Audit, Audit.id == SweepChild.audit_id)
        .where(SweepChild.sweep_id == sweep_id)
        .order_by(SweepChild.position)
    )
    return [(child, audit) for child, audit in rows.tuples()]


def request_cancel(session: Session, *, sweep_id: str) -> None:
    session.execute(update(Sweep).where(Sweep.id == sweep_id).values(cancel_requested=True))


def finished_sweeps(session: Session, *, limit: int = 100) -> list[str]:
    """Sweeps not yet marked completed whose every child is in a terminal state."""
    unfinished_child = exists().where(
        SweepChild.sweep_id == Sweep.id,
        SweepChild.audit_id == Audit.id,
        Audit.state.not_in([str(s) for s in TERMINAL_STATES]),
    )
    query = select(Sweep.id).where(Sweep.completed_at.is_(None), ~unfinished_child).limit(limit)
    return list(session.scalars(query))


def mark_completed(session: Session, *, sweep_id: str) -> bool:
    """Conditional: True for the one caller that moved completed_at from NULL (it emits sweep.completed)."""
    result = session.execute(
        update(Sweep).where(Sweep.id == sweep_id, Sweep.completed_at.is_(None)).values(completed_at=utcnow())
    )
    return result.rowcount == 1  # type: ignore[attr-defined]
