"""Schedules: an audit request or a sweep re-run at every `cron` time (croniter; five fields, or six with
seconds last) or every `interval_seconds`, in UTC.

Who fires: the integrations tick of every API process (embedded default and Celery stack alike, so no
separate beat process has to be kept alive). A DB-driven tick instead of celery beat + celery-redbeat:
the schedule's state (`next_fire_at`) lives beside the audits in the system of record, and a firing is
the INSERT of (schedule_id, fire_time) — a primary key — in the same transaction as the audit it starts,
so two API processes (or two beats) can never fire one time twice, and a restarted process resumes from
the table. A time missed while no process ran fires once, then the schedule moves to the next future time.
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta

from croniter import CroniterError, croniter
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from app.audit.kinds.registry import verdict_of
from app.config import Settings
from app.db import schedules as store
from app.db.models import Audit, AuditState, Schedule, ScheduleRun, utcnow
from app.jobs.checks import QuotaExceeded
from app.jobs.executors import Executor
from app.schemas.schedules import ScheduleRunResource

log = logging.getLogger(__name__)


def next_time(*, cron: str | None, interval_seconds: float | None, after: datetime) -> datetime:
    """The first firing strictly after `after`."""
    if cron is not None:
        return croniter(cron, after).get_next(datetime)
    assert interval_seconds is not None
    return after + timedelta(seconds=interval_seconds)


GAP_RUNS = 64
"""How many of a cron's next times `shortest_gap` looks at: a cron is a product of sets of values, so its
closest two times show within the first few dozen (the finest field's values, then a wrap)."""


def shortest_gap(cron: str, *, after: datetime, below: float = 0.0) -> float:
    """The shortest time in seconds between two consecutive times of `cron` among its next GAP_RUNS (stops
    early once under `below`); inf when it fires once or not at all in that search."""
    times = croniter(cron, after)
    gap = math.inf
    try:
        previous = times.get_next(datetime)
        for _ in range(GAP_RUNS - 1):
            current = times.get_next(datetime)
            gap = min(gap, (current - previous).total_seconds())
            if gap < below:
                break
            previous = current
    except (CroniterError, ValueError, OverflowError):  # no further time: the gaps seen so far
        pass
    return gap


def too_often(seconds: float, min_interval: float) -> str:
    return (
        f"runs {seconds:g} s apart, more often than this service allows: at least {min_interval:g} s "
        "between two runs (ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS)."
    )


def cron_problem(
    cron: str, *, after: datetime | None = None, min_interval: float = 0.0
) -> tuple[str, str | None] | None:
    """Why `cron` cannot drive a schedule, and the refusal's reason (app.schemas.errors.REFUSALS) where
    its schema cannot say it: not a cron expression (None: CRON_PATTERN states it), one that never fires
    (CRON_NEVER_FIRES, such as "0 0 31 2 *": February has no 31st), or one whose closest two times are
    under `min_interval` seconds apart (SERVER_LIMIT: ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS); or None."""
    if not croniter.is_valid(cron):
        return f"cron {cron!r} is not a cron expression (five fields, or six with seconds last).", None
    try:
        croniter(cron, after or utcnow()).get_next(datetime)
    except (CroniterError, ValueError, OverflowError):
        message = f"cron {cron!r} never fires (no date matches it); give a time that exists."
        return message, "CRON_NEVER_FIRES"
    if min_interval > 0:
        gap = shortest_gap(cron, after=after or utcnow(), below=min_interval)
        if gap < min_interval:
            return f"cron {cron!r} {too_often(gap, min_interval)}", "SERVER_LIMIT"
    return None


def run_resource(run: ScheduleRun, audit: Audit | None) -> ScheduleRunResource:
    """One firing as `GET /v1/schedules/{id}/runs` lists it: its audit's state and, once SUCCEEDED, the
    verdict (outcome, headline, violation)."""
    done = audit is not None and audit.state == AuditState.SUCCEEDED
    v = verdict_of(audit.kind, audit.result) if done and audit is not None else None
    return ScheduleRunResource(
        fire_time=run.fire_time,
        audit_id=run.audit_id,
        sweep_id=run.sweep_id,
        state=AuditState(audit.state) if audit is not None else None,
        violation=v.violation if v else None,
        outcome=v.outcome if v else None,
        headline=v.headline if v else None,
    )


def _fire(
    session: Session, schedule: Schedule, run: ScheduleRun, settings: Settings, executor: Executor
) -> None:
    from app.integrations import sweeps
    from app.jobs import submission
    from app.schemas.audits import request_adapter
    from app.schemas.sweeps import SweepRequest

    def link_audit(s: Session, audit: Audit) -> None:
        run.audit_id = audit.id

    def link_sweep(s: Session, sweep_id: str) -> None:
        run.sweep_id = sweep_id

    if schedule.target == "sweep":
        sweeps.submit_sweep(
            session=session,
            tenant_id=schedule.tenant_id,
            request=SweepRequest.model_validate(schedule.body),
            settings=settings,
            executor=executor,
            remember=link_sweep,
        )
    else:
        submission.submit_audit(
            session=session,
            tenant_id=schedule.tenant_id,
            request=request_adapter().validate_python(schedule.body),
            settings=settings,
            executor=executor,
            on_stored=link_audit,
        )


def _skip(session: Session, schedule: Schedule, fire_time: datetime, now: datetime) -> None:
    try:
        store.add_run(session, schedule_id=schedule.id, fire_time=fire_time)
    except IntegrityError:
        session.rollback()
        return
    nxt = next_time(cron=schedule.cron, interval_seconds=schedule.interval_seconds, after=max(now, fire_time))
    store.advance(session, schedule_id=schedule.id, fired=fire_time, next_fire_at=nxt)
    session.commit()


def fire_due(*, sessions: sessionmaker[Session], settings: Settings, executor: Executor) -> int:
    """Fire every schedule whose time has come; returns how many this process fired."""
    now = utcnow()
    with sessions() as session:
        due = [(s.id, s.next_fire_at) for s in store.due_schedules(session, now=now)]
    fired = 0
    for schedule_id, fire_time in due:
        with sessions() as session:
            schedule = session.get(Schedule, schedule_id)
            if schedule is None or schedule.next_fire_at != fire_time:
                continue
            try:
                run = store.add_run(session, schedule_id=schedule_id, fire_time=fire_time)
            except IntegrityError:
                session.rollback()  # another process fired this time
                continue
            store.advance(
                session,
                schedule_id=schedule_id,
                fired=fire_time,
                next_fire_at=next_time(
                    cron=schedule.cron, interval_seconds=schedule.interval_seconds, after=max(now, fire_time)
                ),
            )
            try:
                _fire(session, schedule, run, settings, executor)
            except IntegrityError:
                session.rollback()
                continue
            except QuotaExceeded as exc:  # the tenant is at ICLAUDIT_MAX_ACTIVE_AUDITS: this run is skipped
                log.warning("schedule %s skipped its run of %s: %s", schedule_id, fire_time, exc)
                session.rollback()
                _skip(session, schedule, fire_time, now)
                continue
            except Exception:  # e.g. its dataset was deleted: the run is listed without an audit
                log.exception("schedule %s could not start its run of %s", schedule_id, fire_time)
                session.rollback()
                _skip(session, schedule, fire_time, now)
                continue
            fired += 1
            log.info("schedule %s fired for %s", schedule_id, fire_time.isoformat())
    return fired
