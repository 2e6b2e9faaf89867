"""/v1/audits: submit (202 + Location), read, list (keyset pages), cancel, result (JSON and PNG). Thin
doorways into app.jobs.service, app.db.audits and app.reports.plots."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Response

from app.api.deps import ExecutorDep, SessionDep, SettingsDep, TenantDep
from app.api.errors import ApiError
from app.db import audits as audit_rows
from app.db.models import Audit, AuditState
from app.jobs import service
from app.reports import plots
from app.schemas.audits import AuditList, AuditResource, request_examples, request_union
from app.schemas.errors import ErrorResponse

router = APIRouter(prefix="/v1/audits", tags=["audits"])

AuditRequest = request_union()
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse},
    404: {"model": ErrorResponse},
    422: {"model": ErrorResponse},
}


def _not_found(audit_id: str) -> ApiError:
    return ApiError(404, f"No audit {audit_id!r} (for this API key).")


@router.post("", status_code=202, response_model=AuditResource, responses=_ERRORS)
def submit_audit(
    body: Annotated[AuditRequest, Body(openapi_examples=request_examples())],  # type: ignore[valid-type]
    response: Response,
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    executor: ExecutorDep,
) -> AuditResource:
    """Start an audit. The body's `kind` picks the audit; answer 202 with the audit to poll."""
    audit = service.submit_audit(
        session=session, tenant_id=tenant.id, request=body, settings=settings, executor=executor
    )
    response.headers["Location"] = f"/v1/audits/{audit.id}"
    return AuditResource.of(audit)


@router.get("", response_model=AuditList, responses=_ERRORS)
def list_audits(
    session: SessionDep,
    tenant: TenantDep,
    state: AuditState | None = None,
    kind: str | None = None,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: str | None = None,
) -> AuditList:
    """Newest first; pass `next_page_token` back as `page_token` for the next page."""
    page = audit_rows.list_audits(
        session, tenant_id=tenant.id, state=state, kind=kind, page_size=page_size, page_token=page_token
    )
    return AuditList(audits=[AuditResource.of(a) for a in page.items], next_page_token=page.next_page_token)


@router.get("/{audit_id}", response_model=AuditResource, responses=_ERRORS)
def get_audit(audit_id: str, session: SessionDep, tenant: TenantDep) -> AuditResource:
    audit = audit_rows.get_audit(session, tenant_id=tenant.id, audit_id=audit_id)
    if audit is None:
        raise _not_found(audit_id)
    return AuditResource.of(audit)


@router.post(
    "/{audit_id}/cancel", response_model=AuditResource, responses={**_ERRORS, 409: {"model": ErrorResponse}}
)
def cancel_audit(audit_id: str, session: SessionDep, tenant: TenantDep) -> AuditResource:
    """A PENDING audit is cancelled at once; a RUNNING one stops at its next batch (state CANCELLED)."""
    audit = service.cancel_audit(session=session, tenant_id=tenant.id, audit_id=audit_id)
    if audit is None:
        raise _not_found(audit_id)
    return AuditResource.of(audit)


def _succeeded(session: SessionDep, tenant: TenantDep, audit_id: str) -> Audit:
    """The caller's audit with its result; 404 (with the reason) until it has SUCCEEDED."""
    audit = audit_rows.get_audit(session, tenant_id=tenant.id, audit_id=audit_id)
    if audit is None:
        raise _not_found(audit_id)
    if audit.state != AuditState.SUCCEEDED or audit.result is None:
        why = f": {audit.error['message']}" if audit.error else ""
        raise ApiError(404, f"Audit {audit_id} is {audit.state}{why}; a result exists once it has SUCCEEDED.")
    return audit


@router.get("/{audit_id}/result", responses=_ERRORS)
def get_result(audit_id: str, session: SessionDep, tenant: TenantDep) -> dict[str, Any]:
    """The result alone; 404 until the audit has SUCCEEDED."""
    return _succeeded(session, tenant, audit_id).result


@router.get(
    "/{audit_id}/result.png",
    response_class=Response,
    responses={**_ERRORS, 200: {"content": {"image/png": {}}, "description": "The result's plot."}},
)
def get_result_png(audit_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    """The result drawn as a PNG (app/reports/plots.py); 404 until the audit has SUCCEEDED."""
    audit = _succeeded(session, tenant, audit_id)
    try:
        png = plots.render(audit.kind, audit.request, audit.result)
    except plots.PlotError as exc:
        raise ApiError(404, str(exc)) from exc
    return Response(content=png, media_type="image/png")
