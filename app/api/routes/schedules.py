"""/v1/schedules: re-run an audit or a sweep on a cron (or an interval); list a schedule's runs. Firing:
app.integrations.schedules (the API processes' tick, once per time even with several processes)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app.api.deps import PageToken, SessionDep, SettingsDep, TenantDep
from app.api.errors import ApiError
from app.api.middleware.strict_json import StrictJSONRoute
from app.db import audits as audit_rows
from app.db import schedules as schedule_rows
from app.db.models import Audit, Schedule, utcnow
from app.integrations import schedules, sweeps
from app.jobs.checks import check_request
from app.schemas.errors import ErrorResponse, FieldViolation
from app.schemas.schedules import (
    ScheduleCreate,
    ScheduleList,
    ScheduleResource,
    ScheduleRunList,
)

router = APIRouter(prefix="/v1/schedules", tags=["schedules"], route_class=StrictJSONRoute)

SCHEDULE_RETRY_SECONDS = 60  # Retry-After at ICLAUDIT_MAX_SCHEDULES: a polling hint (deleting one frees room)
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No or an unknown API key."},
    404: {"model": ErrorResponse, "description": "No such schedule for this API key."},
    422: {"model": ErrorResponse, "description": "A bad body or parameter (the path names it)."},
}


def _resource(row: Schedule) -> ScheduleResource:
    return ScheduleResource.model_validate(row, from_attributes=True)


def _get(session: SessionDep, tenant: TenantDep, schedule_id: str) -> Schedule:
    row = schedule_rows.get_schedule(session, tenant_id=tenant.id, schedule_id=schedule_id)
    if row is None:
        raise ApiError(404, f"No schedule {schedule_id!r} (for this API key).")
    return row


@router.post(
    "", status_code=201, response_model=ScheduleResource, responses=_ERRORS, operation_id="createSchedule"
)
def create_schedule(
    body: ScheduleCreate, response: Response, session: SessionDep, tenant: TenantDep, settings: SettingsDep
) -> ScheduleResource:
    """Checked now as a submit would be (dataset, model, limits, every sweep point); the first run is at the
    next cron time (or one interval from now). Runs at least ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS apart
    (422 naming `cron` or `interval_seconds`); at most ICLAUDIT_MAX_SCHEDULES per tenant (429)."""
    least = settings.schedule_min_interval_seconds
    if body.cron is not None and (problem := schedules.cron_problem(body.cron, min_interval=least)):
        message, reason = problem
        raise ApiError(422, message, [FieldViolation(path="$.cron", message=message)], reason=reason)
    if body.interval_seconds is not None and body.interval_seconds < least:
        message = f"interval_seconds {schedules.too_often(body.interval_seconds, least)}"
        detail = [FieldViolation(path="$.interval_seconds", message=message)]
        raise ApiError(422, message, detail, reason="SERVER_LIMIT")
    if body.request is not None:
        target, stored = "audit", body.request.model_dump(mode="json")  # a dataset name: each run's newest
        check_request(session, tenant_id=tenant.id, request=body.request, settings=settings)
    else:
        assert body.sweep is not None
        sweeps.check_notify(body.sweep, settings)
        children = sweeps.expand(
            body.sweep, max_audits=settings.sweep_max_audits, max_bytes=settings.sweep_max_bytes
        )
        for _, _, child in children:
            check_request(session, tenant_id=tenant.id, request=child, settings=settings)
        target, stored = "sweep", body.sweep.model_dump(mode="json")
    audit_rows.lock_tenant(session, tenant_id=tenant.id)  # counted and inserted as one step
    if (held := schedule_rows.count_schedules(session, tenant_id=tenant.id)) >= settings.max_schedules:
        raise ApiError(
            429,
            f"This tenant has {held} schedules; at most {settings.max_schedules} may be (ICLAUDIT_MAX_SCHEDULES). "
            "Delete one, then retry.",
            headers={"Retry-After": str(SCHEDULE_RETRY_SECONDS)},
        )
    row = schedule_rows.add_schedule(
        session,
        tenant_id=tenant.id,
        target=target,
        body=stored,
        cron=body.cron,
        interval_seconds=body.interval_seconds,
        next_fire_at=schedules.next_time(
            cron=body.cron, interval_seconds=body.interval_seconds, after=utcnow()
        ),
    )
    session.commit()
    response.headers["Location"] = f"/v1/schedules/{row.id}"
    return _resource(row)


@router.get("", response_model=ScheduleList, responses=_ERRORS, operation_id="listSchedules")
def list_schedules(
    session: SessionDep,
    tenant: TenantDep,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: PageToken = None,
) -> ScheduleList:
    page = schedule_rows.list_schedules(
        session, tenant_id=tenant.id, page_size=page_size, page_token=page_token
    )
    return ScheduleList(schedules=[_resource(r) for r in page.items], next_page_token=page.next_page_token)


@router.get("/{schedule_id}", response_model=ScheduleResource, responses=_ERRORS, operation_id="getSchedule")
def get_schedule(schedule_id: str, session: SessionDep, tenant: TenantDep) -> ScheduleResource:
    return _resource(_get(session, tenant, schedule_id))


@router.delete("/{schedule_id}", status_code=204, responses=_ERRORS, operation_id="deleteSchedule")
def delete_schedule(schedule_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    """No further runs; the audits it started stay."""
    if not schedule_rows.delete_schedule(session, tenant_id=tenant.id, schedule_id=schedule_id):
        raise ApiError(404, f"No schedule {schedule_id!r} (for this API key).")
    session.commit()
    return Response(status_code=204)


@router.get(
    "/{schedule_id}/runs", response_model=ScheduleRunList, responses=_ERRORS, operation_id="listScheduleRuns"
)
def list_schedule_runs(schedule_id: str, session: SessionDep, tenant: TenantDep) -> ScheduleRunList:
    """Each firing, newest first, with its audit's state and verdict."""
    schedule = _get(session, tenant, schedule_id)
    out = []
    for run in schedule_rows.runs(session, schedule_id=schedule.id):
        audit = session.get(Audit, run.audit_id) if run.audit_id else None
        out.append(schedules.run_resource(run, audit))
    return ScheduleRunList(runs=out)
