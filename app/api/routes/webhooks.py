"""/v1/webhooks: tenant-level endpoints (the secret is shown once), their delivery log and manual
redelivery, and the tenant's secret for per-request `notify` URLs. Events and delivery:
app.integrations.webhooks."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from starlette.convertors import StringConvertor, register_url_convertor

from app.api.deps import PageToken, SessionDep, SettingsDep, TenantDep
from app.api.errors import ApiError
from app.api.middleware.strict_json import StrictJSONRoute
from app.db import webhooks as webhook_rows
from app.db.models import WebhookEndpoint
from app.egress import EgressRefused, check_url
from app.integrations.webhooks import new_secret
from app.schemas.errors import ErrorResponse, FieldViolation
from app.schemas.webhooks import (
    DeliveryList,
    DeliveryResource,
    NotifySecret,
    WebhookCreate,
    WebhookCreated,
    WebhookList,
    WebhookResource,
)


class WebhookIdConvertor(StringConvertor):
    """A webhook id: any path segment except `notify-secret`, so `/{webhook_id}` does not take that path's
    other methods (DELETE) and a 405 there allows GET only, as the OpenAPI document says."""

    regex = "(?!notify-secret(?:/|$))[^/]+"


register_url_convertor("webhook_id", WebhookIdConvertor())

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"], route_class=StrictJSONRoute)

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No or an unknown API key."},
    404: {"model": ErrorResponse, "description": "No such webhook (or delivery) for this API key."},
    422: {"model": ErrorResponse, "description": "A bad body or parameter (the path names it)."},
}


def _get(session: SessionDep, tenant: TenantDep, webhook_id: str) -> WebhookEndpoint:
    row = webhook_rows.get_endpoint(session, tenant_id=tenant.id, endpoint_id=webhook_id)
    if row is None:
        raise ApiError(404, f"No webhook {webhook_id!r} (for this API key).")
    return row


@router.post(
    "", status_code=201, response_model=WebhookCreated, responses=_ERRORS, operation_id="createWebhook"
)
def create_webhook(
    body: WebhookCreate, response: Response, session: SessionDep, tenant: TenantDep, settings: SettingsDep
) -> WebhookCreated:
    """Register a URL for the tenant's events. The answer holds the signing secret, shown only here.
    Loopback, private, link-local and metadata addresses are refused unless ICLAUDIT_WEBHOOK_ALLOWLIST
    names them."""
    try:
        check_url(body.url, settings.webhook_egress)
    except EgressRefused as exc:
        detail = [FieldViolation(path="$.url", message=exc.reason)]
        raise ApiError(422, f"url: {exc.reason}.", detail, reason="EGRESS_REFUSED") from exc
    row = webhook_rows.add_endpoint(
        session,
        tenant_id=tenant.id,
        url=body.url,
        secret=new_secret(),
        events=list(dict.fromkeys(body.events)),
        description=body.description,
    )
    session.commit()
    response.headers["Location"] = f"/v1/webhooks/{row.id}"
    return WebhookCreated.model_validate(row)


@router.get("", response_model=WebhookList, responses=_ERRORS, operation_id="listWebhooks")
def list_webhooks(
    session: SessionDep,
    tenant: TenantDep,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: PageToken = None,
) -> WebhookList:
    page = webhook_rows.list_endpoints(
        session, tenant_id=tenant.id, page_size=page_size, page_token=page_token
    )
    return WebhookList(
        webhooks=[WebhookResource.model_validate(r) for r in page.items], next_page_token=page.next_page_token
    )


@router.get("/notify-secret", response_model=NotifySecret, responses=_ERRORS, operation_id="getNotifySecret")
def get_notify_secret(session: SessionDep, tenant: TenantDep) -> NotifySecret:
    """The secret that signs deliveries to a request's `notify` URL (made on first use; one per tenant)."""
    secret = webhook_rows.notify_secret(session, tenant_id=tenant.id, make=new_secret)
    return NotifySecret(secret=secret)


@router.get(
    "/{webhook_id:webhook_id}", response_model=WebhookResource, responses=_ERRORS, operation_id="getWebhook"
)
def get_webhook(webhook_id: str, session: SessionDep, tenant: TenantDep) -> WebhookResource:
    return WebhookResource.model_validate(_get(session, tenant, webhook_id))


@router.delete("/{webhook_id:webhook_id}", status_code=204, responses=_ERRORS, operation_id="deleteWebhook")
def delete_webhook(webhook_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    """Stops every delivery to it, pending ones included, and drops its delivery log."""
    if not webhook_rows.delete_endpoint(session, tenant_id=tenant.id, endpoint_id=webhook_id):
        raise ApiError(404, f"No webhook {webhook_id!r} (for this API key).")
    session.commit()
    return Response(status_code=204)


@router.get(
    "/{webhook_id:webhook_id}/deliveries",
    response_model=DeliveryList,
    responses=_ERRORS,
    operation_id="listWebhookDeliveries",
)
def list_deliveries(
    webhook_id: str,
    session: SessionDep,
    tenant: TenantDep,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: PageToken = None,
) -> DeliveryList:
    """Newest first: each event sent to this webhook, its state, attempts and the last answer."""
    endpoint = _get(session, tenant, webhook_id)
    page = webhook_rows.list_deliveries(
        session, tenant_id=tenant.id, endpoint_id=endpoint.id, page_size=page_size, page_token=page_token
    )
    return DeliveryList(
        deliveries=[DeliveryResource.model_validate(d) for d in page.items],
        next_page_token=page.next_page_token,
    )


@router.post(
    "/{webhook_id:webhook_id}/deliveries/{delivery_id}/redeliver",
    status_code=202,
    response_model=DeliveryResource,
    responses=_ERRORS,
    operation_id="redeliverWebhook",
)
def redeliver(webhook_id: str, delivery_id: str, session: SessionDep, tenant: TenantDep) -> DeliveryResource:
    """Send the delivery again (same `webhook-id`), now and with the usual retries."""
    endpoint = _get(session, tenant, webhook_id)
    delivery = webhook_rows.get_delivery(session, tenant_id=tenant.id, delivery_id=delivery_id)
    if delivery is None or delivery.endpoint_id != endpoint.id:
        raise ApiError(404, f"No delivery {delivery_id!r} for webhook {webhook_id!r}.")
    webhook_rows.redeliver(session, delivery_id=delivery.id)
    session.commit()
    session.refresh(delivery)
    return DeliveryResource.model_validate(delivery)
