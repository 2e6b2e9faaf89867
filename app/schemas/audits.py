"""The audit resource (AIP-151 long-running operation), the request body and the result: discriminated
unions on `kind`, built from `app.audit.kinds.registry.KINDS` (each kind module contributes `Request` and
`EXAMPLE`; app/audit/results/<kind>.py its typed `Result`)."""

from __future__ import annotations

from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Self, Union

from pydantic import BaseModel, Field, TypeAdapter

from app.audit.kinds.base import AuditRequestBase
from app.audit.kinds.registry import KINDS, kind_module, result_model, typed_result, verdict_of
from app.audit.results.base import ResultBase
from app.audit.results.digest import Verdict, claims_nothing, digest
from app.db.constants import CLAIM_FIELDS, AuditState

if TYPE_CHECKING:
    from app.db.models import Audit


def _camel(kind: str) -> str:
    return "".join(part.capitalize() for part in kind.split("_"))


@cache
def request_models() -> tuple[type[AuditRequestBase], ...]:
    """Each kind's `Request`, subclassed under a readable OpenAPI name (`BoundAuditRequest`, …)."""
    return tuple(
        type(
            f"{_camel(kind)}AuditRequest",
            (kind_module(kind).Request,),
            {"__doc__": kind_module(kind).Request.__doc__ or f"A `{kind}` audit.", "__module__": __name__},
        )
        for kind in KINDS
    )


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


if TYPE_CHECKING:  # the union below is built at import: a type checker sees its common base
    AuditResult = ResultBase
else:
    AuditResult = Annotated[
        Union[tuple(result_model(kind) for kind in KINDS)],  # noqa: UP007 - built at import from the registry
        Field(discriminator="kind"),
    ]
"""The typed result of any kind (`kind` tells which)."""


_DIGESTS: dict[tuple[str, Any], Verdict | None] = {}
_DIGESTS_KEPT = 4096


def _digest_of(row: Any) -> Verdict | None:
    """A SUCCEEDED audit's verdict digest, kept per audit and finish time: a finished result never changes,
    and validating it into its model (~0.1 ms, ~1 ms for a result of many records) would otherwise be paid
    again on every row of every list page and event."""
    key = (row.id, row.finished_at)
    if key not in _DIGESTS:
        if len(_DIGESTS) >= _DIGESTS_KEPT:
            _DIGESTS.clear()
        _DIGESTS[key] = verdict_of(row.kind, row.result)
    return _DIGESTS[key]


class Progress(BaseModel):
    stage: str
    fraction: float = Field(ge=0.0, le=1.0)
    eta_seconds: float | None
    message: str


class ErrorInfo(BaseModel):
    code: str = Field(description="AUDIT_ERROR (the request cannot run), DEADLINE_EXCEEDED or INTERNAL.")
    message: str


def claimed_epsilon(request: dict[str, Any]) -> float | None:
    """The ε the audited system claims, from the request (the fields in app.db.constants.CLAIM_FIELDS)."""
    for name in CLAIM_FIELDS:
        if isinstance(request.get(name), int | float):
            return float(request[name])
    return None


class AuditSummary(BaseModel):
    """`GET /v1/audits` (default `view=summary`) and each `/events` message: no request body, no result."""

    id: str
    kind: str
    state: AuditState
    progress: Progress
    epsilon_claimed: float | None = Field(
        description="The ε the request says the system claims, if any; null once the result says nothing is "
        "claimed (its verdict judged against max_epsilon)."
    )
    verdict: Verdict | None = Field(description="A digest of the result; null until SUCCEEDED.")
    error: ErrorInfo | None
    cancel_requested: bool
    attempt: int = Field(description="How many times a runner has claimed this audit.")
    created_at: datetime
    updated_at: datetime = Field(
        description="The audit's last change: finished, else its runner's last progress or heartbeat, else "
        "started, else created."
    )
    started_at: datetime | None
    finished_at: datetime | None
    follows: str | None = Field(
        default=None,
        description="The audit whose next step this one is (its request's `until_answer` chain); null when it "
        "was submitted.",
    )
    followed_by: str | None = Field(
        default=None,
        description="The audit that takes this one's next step (`until_answer`: set with the outcome, before "
        "SUCCEEDED is visible); null when none was taken (the progress message says why).",
    )

    @classmethod
    def of(cls, row: Any, epsilon_claimed: float | None = None, typed: ResultBase | None = None) -> Self:
        """From an `Audit` or a row of app.db.polling's summary columns (which carry `epsilon_claimed`);
        `typed`: its result as its model, when the caller has it."""
        if epsilon_claimed is None:
            epsilon_claimed = getattr(row, "epsilon_claimed", None)
        done = row.state == AuditState.SUCCEEDED
        if done and claims_nothing(row.result):
            epsilon_claimed = None  # the verdict says nothing is claimed: no "claimed 1" beside a leak
        verdict = (digest(typed) if typed is not None else _digest_of(row)) if done else None
        times = (row.created_at, row.started_at, row.heartbeat_at, row.finished_at)
        return cls(
            id=row.id,
            kind=row.kind,
            state=AuditState(row.state),
            progress=Progress(
                stage=row.progress_stage,
                fraction=row.progress_fraction,
                eta_seconds=row.progress_eta_seconds,
                message=row.progress_message,
            ),
            epsilon_claimed=epsilon_claimed,
            verdict=verdict,
            error=ErrorInfo(**row.error) if row.error else None,
            cancel_requested=row.cancel_requested,
            attempt=row.attempt,
            created_at=row.created_at,
            updated_at=row.finished_at or max(t for t in times if t is not None),
            started_at=row.started_at,
            finished_at=row.finished_at,
            follows=row.follows,
            followed_by=row.followed_by,
        )


class AuditResource(AuditSummary):
    """The whole audit (`GET /v1/audits/{id}`, `view=full`): the summary plus the request and the result."""

    request: dict[str, Any]
    result: AuditResult | None = Field(
        description="The typed result once SUCCEEDED (its `kind` says which result schema); null before."
    )

    @classmethod
    def of(cls, row: Audit, epsilon_claimed: float | None = None, typed: ResultBase | None = None) -> Self:
        typed = typed if typed is not None else typed_result(row.kind, row.result)
        summary = AuditSummary.of(row, epsilon_claimed or claimed_epsilon(row.request), typed)
        return cls(**dict(summary), request=row.request, result=typed)


class AuditSummaryList(BaseModel):
    audits: list[AuditSummary]
    next_page_token: str | None = Field(
        description="Pass as `page_token` for the next page; null on the last."
    )


class AuditList(BaseModel):
    audits: list[AuditResource]
    next_page_token: str | None = Field(
        description="Pass as `page_token` for the next page; null on the last."
    )
