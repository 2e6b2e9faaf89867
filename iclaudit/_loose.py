"""The light client's response models (clients/python: no server code installed).

The server's distribution gives `iclaudit.client` the API's own models (app/schemas) and every kind's typed
result (app/audit/results); the light distribution has neither, so each is a model that keeps every field
the server sent, readable as an attribute (`audit.result.epsilon_lower`, `sweep.state`) and by
`model_dump()`. The names are those of app/schemas, so code written against the client runs on both.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class Loose(BaseModel):
    """Every field the server sent, as attributes; nothing checked beyond JSON."""

    model_config = ConfigDict(extra="allow")


class ResultBase(Loose):
    kind: str | None = None


AuditResult = ResultBase


class Verdict(Loose):
    outcome: str | None = None
    headline: str | None = None
    epsilon_lower: float | None = None
    epsilon_theory: float | None = None
    epsilon_detectable: float | None = None
    violation: bool | None = None


def validate_result(kind: str, body: dict[str, Any]) -> ResultBase:
    return ResultBase.model_validate({"kind": kind, **body})


class WebhookCreated(Loose):
    pass


class WebhookResource(Loose):
    pass


class WebhookList(Loose):
    pass


class DeliveryResource(Loose):
    pass


class DeliveryList(Loose):
    pass


class NotifySecret(Loose):
    pass


class SweepResource(Loose):
    state: str


class SweepList(Loose):
    pass


class SweepResult(Loose):
    pass


class ScheduleResource(Loose):
    pass


class ScheduleList(Loose):
    pass


class ScheduleRunList(Loose):
    pass
