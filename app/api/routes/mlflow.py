"""/v1/mlflow-sinks: a tenant's MLflow tracking servers, each finished audit a run in the sink's experiment
(app/integrations/mlflow.py), and their delivery log."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response

from app.api.deps import PageToken, SessionDep, SettingsDep, TenantDep
from app.api.errors import ApiError
from app.api.middleware.strict_json import StrictJSONRoute
from app.db import mlflow as sink_rows
from app.db.models import MlflowSink
from app.egress import EgressRefused, check_url
from app.schemas.errors import ErrorResponse, FieldViolation
from app.schemas.mlflow import MlflowDeliveryList, MlflowSinkCreate, MlflowSinkList, MlflowSinkResource
from app.schemas.webhooks import DeliveryResource

router = APIRouter(prefix="/v1/mlflow-sinks", tags=["mlflow"], route_class=StrictJSONRoute)

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No or an unknown API key."},
    404: {"model": ErrorResponse, "description": "No such sink for this API key."},
    422: {"model": ErrorResponse, "description": "A bad body or parameter (the path names it)."},
}


def _get(session: SessionDep, tenant: TenantDep, sink_id: str) -> MlflowSink:
    row = sink_rows.get_sink(session, tenant_id=tenant.id, sink_id=sink_id)
    if row is None:
        raise ApiError(404, f"No MLflow sink {sink_id!r} (for this API key).")
    return row


@router.post(
    "", status_code=201, response_model=MlflowSinkResource, responses=_ERRORS, operation_id="createMlflowSink"
)
def create_sink(
    body: MlflowSinkCreate, response: Response, session: SessionDep, tenant: TenantDep, settings: SettingsDep
) -> MlflowSinkResource:
    """Send every audit of this tenant that finishes from now on to an MLflow experiment, as a run (sweeps as
    nested runs). The tracking server passes the webhooks' egress checks (ICLAUDIT_WEBHOOK_ALLOWLIST)."""
    try:
        check_url(body.tracking_uri, settings.webhook_egress)
    except EgressRefused as exc:
        detail = [FieldViolation(path="$.tracking_uri", message=exc.reason)]
        raise ApiError(422, f"tracking_uri: {exc.reason}.", detail, reason="EGRESS_REFUSED") from exc
    row = sink_rows.add_sink(
        session,
        tenant_id=tenant.id,
        tracking_uri=body.tracking_uri,
        experiment=body.experiment,
        token=body.token,
        description=body.description,
    )
    session.commit()
    response.headers["Location"] = f"/v1/mlflow-sinks/{row.id}"
    return MlflowSinkResource.of(row)


@router.get("", response_model=MlflowSinkList, responses=_ERRORS, operation_id="listMlflowSinks")
def list_sinks(
    session: SessionDep,
    tenant: TenantDep,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: PageToken = None,
) -> MlflowSinkList:
    page = sink_rows.list_sinks(session, tenant_id=tenant.id, page_size=page_size, page_token=page_token)
    return MlflowSinkList(
        sinks=[MlflowSinkResource.of(r) for r in page.items], next_page_token=page.next_page_token
    )


@router.get("/{sink_id}", response_model=MlflowSinkResource, responses=_ERRORS, operation_id="getMlflowSink")
def get_sink(sink_id: str, session: SessionDep, tenant: TenantDep) -> MlflowSinkResource:
    return MlflowSinkResource.of(_get(session, tenant, sink_id))


@router.delete("/{sink_id}", status_code=204, responses=_ERRORS, operation_id="deleteMlflowSink")
def delete_sink(sink_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    """Stops every delivery to it, pending ones included, and drops its delivery log (runs stay in MLflow)."""
    if not sink_rows.delete_sink(session, tenant_id=tenant.id, sink_id=sink_id):
        raise ApiError(404, f"No MLflow sink {sink_id!r} (for this API key).")
    session.commit()
    return Response(status_code=204)


@router.get(
    "/{sink_id}/deliveries",
    response_model=MlflowDeliveryList,
    responses=_ERRORS,
    operation_id="listMlflowSinkDeliveries",
)
def list_deliveries(
    sink_id: str,
    session: SessionDep,
    tenant: TenantDep,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: PageToken = None,
) -> MlflowDeliveryList:
    """Newest first: each run written (or being written) to this sink, its state, attempts and last error."""
    sink = _get(session, tenant, sink_id)
    page = sink_rows.list_deliveries(
        session, tenant_id=tenant.id, sink_id=sink.id, page_size=page_size, page_token=page_token
    )
    return MlflowDeliveryList(
        deliveries=[DeliveryResource.model_validate(d) for d in page.items],
        next_page_token=page.next_page_token,
    )
