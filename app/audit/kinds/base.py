"""Fields every audit kind shares."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class AuditRequestBase(BaseModel):
    """`dataset`, `model` and `seed` are common to all kinds (a `bound` audit needs neither data nor model)."""

    model_config = ConfigDict(extra="forbid")

    dataset: str | None = Field(default=None, description="Built-in dataset name or an uploaded dataset id.")
    model: str | None = Field(default=None, description="Registered model name (GET /v1/models).")
    seed: int = Field(
        default=0, ge=0, description="Seeds every random choice; the same seed gives the same result."
    )
