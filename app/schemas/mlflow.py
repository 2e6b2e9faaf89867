"""MLflow sinks (app/integrations/mlflow.py): where a tenant's finished audits become MLflow runs."""

from __future__ import annotations

from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.webhooks import URL_PATTERN, DeliveryResource


class MlflowSinkCreate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tracking_uri: str = Field(
        min_length=1,
        max_length=2000,
        description="The MLflow tracking server's http(s) URL (what `MLFLOW_TRACKING_URI` names), e.g. "
        "`https://mlflow.example.com`. Internal addresses need an ICLAUDIT_WEBHOOK_ALLOWLIST entry.",
        json_schema_extra={"pattern": URL_PATTERN},
    )
    experiment: str = Field(
        min_length=1,
        max_length=500,
        description="The experiment every run goes to (made on the first run when it does not exist).",
    )
    token: str | None = Field(
        default=None,
        min_length=1,
        max_length=2000,
        description="Sent as `Authorization: Bearer <token>` (MLflow behind an authenticating proxy, "
        "Databricks). Stored, never shown back.",
    )
    description: str = Field(default="", max_length=200)


class MlflowSinkResource(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    tracking_uri: str
    experiment: str
    has_token: bool = Field(description="Whether a token is stored (it is never shown).")
    description: str
    created_at: datetime

    @classmethod
    def of(cls, row: object) -> MlflowSinkResource:
        return cls.model_validate(
            {
                **{
                    k: getattr(row, k)
                    for k in ("id", "tracking_uri", "experiment", "description", "created_at")
                },
                "has_token": bool(getattr(row, "token", None)),
            }
        )


class MlflowSinkList(BaseModel):
    sinks: list[MlflowSinkResource]
    next_page_token: str | None


class MlflowDeliveryList(BaseModel):
    deliveries: list[DeliveryResource] = Field(
        description="One per finished audit (`mlflow.run`) or completed sweep (`mlflow.sweep`), newest first."
    )
    next_page_token: str | None
