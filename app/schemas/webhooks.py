"""Webhook endpoints and their delivery log (Standard Webhooks; app/integrations/webhooks.py)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

EventType = Literal[
    "audit.succeeded",
    "audit.failed",
    "audit.cancelled",
    "audit.violation",
    "audit.leak",
    "sweep.completed",
]
EVENTS_DESCRIPTION = (
    "Events to send; empty: all of them. audit.succeeded, audit.failed, audit.cancelled: an audit ended "
    "(`data.verdict` holds its verdict: outcome, headline, epsilon_detectable); audit.violation: its verdict "
    "is a violation of the claimed ε; audit.leak: nothing is claimed and it shows leakage above max_epsilon "
    "(a scheduled run: either fires when that changed since the previous run); sweep.completed: every child "
    "of a sweep ended."
)


# What JSON Schema can state of the egress check, so a client sees it before sending: an http or https
# scheme (any case) and a host without userinfo; the check itself (app/egress.py) gives the error messages.
URL_PATTERN = r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#@]+([/?#].*)?$"


class WebhookCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(
        min_length=1,
        max_length=2000,
        description="http(s) URL that receives the POSTs.",
        json_schema_extra={"pattern": URL_PATTERN},
    )
    events: list[EventType] = Field(
        default_factory=list, max_length=len(get_args(EventType)), description=EVENTS_DESCRIPTION
    )
    description: str = Field(default="", max_length=200)


class WebhookResource(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    url: str
    events: list[EventType]
    description: str
    created_at: datetime


class WebhookCreated(WebhookResource):
    secret: str = Field(
        description="`whsec_…`: verifies `webhook-signature` (Standard Webhooks). Shown only in this answer."
    )


class WebhookList(BaseModel):
    webhooks: list[WebhookResource]
    next_page_token: str | None


class NotifySecret(BaseModel):
    secret: str = Field(description="`whsec_…` that signs deliveries to a request's `notify` URL.")


class DeliveryResource(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str = Field(description="The `webhook-id` header: the same on every attempt of this delivery.")
    endpoint_id: str | None
    url: str
    event_type: str
    payload: dict[str, Any]
    state: Literal["PENDING", "SUCCEEDED", "FAILED"]
    attempts: int
    next_attempt_at: datetime
    last_status: int | None = Field(description="HTTP status of the last answer (null: no answer).")
    last_error: str
    created_at: datetime
    delivered_at: datetime | None


class DeliveryList(BaseModel):
    deliveries: list[DeliveryResource]
    next_page_token: str | None
