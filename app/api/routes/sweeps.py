"""/v1/sweeps: submit a grid of audits (202), read (progress = the children's), list, cancel (cascades),
and the aggregate result as JSON, CSV and PNG. Thin doorways into app.integrations.sweeps."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from app.api.deps import ExecutorDep, PageToken, SessionDep, SettingsDep, TenantDep
from app.api.errors import ApiError
from app.api.idempotency import IdempotencyKeyHeader, Remember, create_once
from app.api.middleware.strict_json import StrictJSONRoute
from app.db import sweeps as sweep_rows
from app.db.models import TERMINAL_STATES, Sweep
from app.integrations import sweeps
from app.reports.plots import PlotError
from app.reports.sweep_plot import render_sweep
from app.schemas.errors import ErrorResponse
from app.schemas.sweeps import EXAMPLE, SweepList, SweepRequest, SweepResource, SweepResult

router = APIRouter(prefix="/v1/sweeps", tags=["sweeps"], route_class=StrictJSONRoute)

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No or an unknown API key."},
    404: {"model": ErrorResponse, "description": "No such sweep for this API key."},
    422: {"model": ErrorResponse, "description": "A bad body, grid point or parameter (the path names it)."},
}
_NOT_DONE: dict[int | str, dict[str, Any]] = {
    409: {"model": ErrorResponse, "description": "Not every child has finished yet."}
}


def _get(session: SessionDep, tenant: TenantDep, sweep_id: str) -> Sweep:
    sweep = sweep_rows.get_sweep(session, tenant_id=tenant.id, sweep_id=sweep_id)
    if sweep is None:
        raise ApiError(404, f"No sweep {sweep_id!r} (for this API key).")
    return sweep


def _resource(session: SessionDep, sweep: Sweep) -> SweepResource:
    return sweeps.resource(sweep, sweep_rows.children(session, sweep_id=sweep.id))


@router.post("", status_code=202, response_model=SweepResource, responses=_ERRORS, operation_id="submitSweep")
def submit_sweep(
    body: Annotated[
        SweepRequest, Body(openapi_examples={"grid": {"summary": "ε × partitions", "value": EXAMPLE}})
    ],
    response: Response,
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    executor: ExecutorDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> SweepResource:
    """One child audit per grid point and seed, each validated like a submitted audit (a bad point is 422
    naming its grid key; nothing is stored) and enqueued as its own message."""

    def create(remember: Remember | None) -> str:
        return sweeps.submit_sweep(
            session=session,
            tenant_id=tenant.id,
            request=body,
            settings=settings,
            executor=executor,
            remember=remember,
        ).id

    sweep_id = create_once(
        session=session,
        tenant_id=tenant.id,
        key=idempotency_key,
        operation="submitSweep",
        body=body.model_dump(mode="json"),
        status_code=202,
        settings=settings,
        response=response,
        create=create,
    )
    response.headers["Location"] = f"/v1/sweeps/{sweep_id}"
    return _resource(session, _get(session, tenant, sweep_id))


@router.get("", response_model=SweepList, responses=_ERRORS, operation_id="listSweeps")
def list_sweeps(
    session: SessionDep,
    tenant: TenantDep,
    page_size: Annotated[int, Query(ge=1, le=100)] = 20,
    page_token: PageToken = None,
) -> SweepList:
    """Newest first; pass `next_page_token` back as `page_token` for the next page."""
    page = sweep_rows.list_sweeps(session, tenant_id=tenant.id, page_size=page_size, page_token=page_token)
    return SweepList(sweeps=[_resource(session, s) for s in page.items], next_page_token=page.next_page_token)


@router.get("/{sweep_id}", response_model=SweepResource, responses=_ERRORS, operation_id="getSweep")
def get_sweep(sweep_id: str, session: SessionDep, tenant: TenantDep) -> SweepResource:
    return _resource(session, _get(session, tenant, sweep_id))


@router.post(
    "/{sweep_id}/cancel",
    response_model=SweepResource,
    responses={**_ERRORS, 409: {"model": ErrorResponse, "description": "Every child already finished."}},
    operation_id="cancelSweep",
)
def cancel_sweep(sweep_id: str, session: SessionDep, tenant: TenantDep) -> SweepResource:
    """Cancels every child not yet finished (PENDING at once, RUNNING at its next batch)."""
    sweep = _get(session, tenant, sweep_id)
    rows = sweep_rows.children(session, sweep_id=sweep.id)
    if all(a.state in TERMINAL_STATES for _, a in rows):
        raise ApiError(409, f"Sweep {sweep_id} already finished; there is nothing to cancel.")
    sweeps.cancel_sweep(session, sweep=sweep)
    return _resource(session, sweep)


def _finished_result(session: SessionDep, tenant: TenantDep, sweep_id: str) -> SweepResult:
    sweep = _get(session, tenant, sweep_id)
    rows = sweep_rows.children(session, sweep_id=sweep.id)
    pending = sum(1 for _, a in rows if a.state not in TERMINAL_STATES)
    if pending:
        raise ApiError(409, f"Sweep {sweep_id} has {pending} of {len(rows)} audits still to finish.")
    return sweeps.result(sweep, rows)


@router.get(
    "/{sweep_id}/result",
    response_model=SweepResult,
    responses={**_ERRORS, **_NOT_DONE},
    operation_id="getSweepResult",
)
def get_sweep_result(sweep_id: str, session: SessionDep, tenant: TenantDep) -> SweepResult:
    """The grid as a table: ε_empirical, ε_theory and violation per child, and per point over its seeds."""
    return _finished_result(session, tenant, sweep_id)


@router.get(
    "/{sweep_id}/result.csv",
    response_class=Response,
    responses={
        **_ERRORS,
        **_NOT_DONE,
        200: {"content": {"text/csv": {}}, "description": "One line per child audit."},
    },
    operation_id="getSweepResultCsv",
)
def get_sweep_result_csv(sweep_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    return Response(sweeps.result_csv(_finished_result(session, tenant, sweep_id)), media_type="text/csv")


@router.get(
    "/{sweep_id}/result.png",
    response_class=Response,
    responses={
        **_ERRORS,
        **_NOT_DONE,
        200: {"content": {"image/png": {}}, "description": "ε_empirical against the first grid key."},
    },
    operation_id="getSweepResultPng",
)
def get_sweep_result_png(sweep_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    res = _finished_result(session, tenant, sweep_id)
    try:
        png = render_sweep(res.grid, [r.model_dump(mode="json") for r in res.rows])
    except PlotError as exc:
        raise ApiError(404, str(exc)) from exc
    return Response(content=png, media_type="image/png")
