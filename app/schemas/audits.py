"""The audit resource (AIP-151 long-running operation) and the request body: a discriminated union on
`kind`, built from `app.audit.kinds.registry.KINDS` (each kind module contributes `Request` and `EXAMPLE`)."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from app.audit.kinds.base import AuditRequestBase
from app.audit.kinds.registry import KINDS, kind_module
from app.db.models import Audit, AuditState


@cache
def request_models() -> tuple[type[AuditRequestBase], ...]:
    return tuple(kind_module(kind).Request for kind in KINDS)


@cache
def request_examples() -> dict[str, dict[str, Any]]:
    """One OpenAPI example per kind (shown in /docs)."""
    return {kind: {"summary": f"a `{kind}` audit", "value": kind_module(kind).EXAMPLE} for kind in KINDS}


def request_union() -> Any:
    """`Annotated[Union[<each kind's Request>], Field(discriminator="kind")]`."""
    return Annotated[Union[request_models()], Field(discriminator="kind")]  # noqa: UP007 - built at run time


@cache
def request_adapter() -> TypeAdapter[Any]:
    return TypeAdapter(request_union())


class Progress(BaseModel):
    stage: str
    fraction: float = Field(ge=0.0, le=1.0)
    eta_seconds: float | None
    message: str


class ErrorInfo(BaseModel):
    code: str = Field(description="AUDIT_ERROR (the request cannot run), DEADLINE_EXCEEDED or INTERNAL.")
    message: str


class AuditResource(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str
    kind: str
    state: AuditState
    progress: Progress
    request: dict[str, Any]
    result: dict[str, Any] | None
    error: ErrorInfo | None
    cancel_requested: bool
    attempt: int = Field(description="How many times a runner has claimed this audit.")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @classmethod
    def of(cls, audit: Audit) -> AuditResource:
        return cls(
            id=audit.id,
            kind=audit.kind,
            state=AuditState(audit.state),
            progress=Progress(
                stage=audit.progress_stage,
                fraction=audit.progress_fraction,
                eta_seconds=audit.progress_eta_seconds,
                message=audit.progress_message,
            ),
            request=audit.request,
            result=audit.result,
            error=ErrorInfo(**audit.error) if audit.error else None,
            cancel_requested=audit.cancel_requested,
            attempt=audit.attempt,
            created_at=audit.created_at,
            started_at=audit.started_at,
            finished_at=audit.finished_at,
        )


class AuditList(BaseModel):
    audits: list[AuditResource]
    next_page_token: str | None = Field(
        description="Pass as `page_token` for the next page; null on the last."
    )
