"""Schedules and their runs. A firing inserts (schedule_id, fire_time) — the primary key — so of several
API processes ticking at once exactly one fires each time; the others' INSERT fails."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.orm import Session

from app.db.models import Schedule, ScheduleRun
from app.db.scoping import Page, keyset_page, owned


def add_schedule(session: Session, **fields: Any) -> Schedule:
    row = Schedule(**fields)
    session.add(row)
    session.flush()
    return row


def count_schedules(session: Session, *, tenant_id: str) -> int:
    """The tenant's schedules (ICLAUDIT_MAX_SCHEDULES caps them)."""
    return int(session.scalar(select(func.count()).where(Schedule.tenant_id == tenant_id)) or 0)


def get_schedule(session: Session, *, tenant_id: str, schedule_id: str) -> Schedule | None:
    return session.scalar(owned(Schedule, tenant_id).where(Schedule.id == schedule_id))


def list_schedules(
    session: Session, *, tenant_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    return keyset_page(session, owned(Schedule, tenant_id), Schedule, page_size, page_token)


def delete_schedule(session: Session, *, tenant_id: str, schedule_id: str) -> bool:
    result = session.execute(
        delete(Schedule).where(Schedule.tenant_id == tenant_id, Schedule.id == schedule_id)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def due_schedules(session: Session, *, now: datetime, limit: int = 50) -> list[Schedule]:
    return list(
        session.scalars(
            select(Schedule).where(Schedule.next_fire_at <= now).order_by(Schedule.next_fire_at).limit(limit)
        )
    )


def add_run(session: Session, *, schedule_id: str, fire_time: datetime) -> ScheduleRun:
    """Flushes at once: IntegrityError when another process fired this time already."""
    run = ScheduleRun(schedule_id=schedule_id, fire_time=fire_time)
    session.add(run)
    session.flush()
    return run


def advance(session: Session, *, schedule_id: str, fired: datetime, next_fire_at: datetime) -> None:
    session.execute(
        update(Schedule)
        .where(Schedule.id == schedule_id, Schedule.next_fire_at == fired)
        .values(next_fire_at=next_fire_at)
        .execution_options(synchronize_session=False)
    )


def runs(session: Session, *, schedule_id: str, limit: int = 100) -> list[ScheduleRun]:
    return list(
        session.scalars(
            select(ScheduleRun)
            .where(ScheduleRun.schedule_id == schedule_id)
            .order_by(ScheduleRun.fire_time.desc())
            .limit(limit)
        )
    )
