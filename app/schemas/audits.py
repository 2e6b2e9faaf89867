"""The audit resource (AIP-151 long-running operation), the request body and the result: discriminated
unions on `kind`, built from `app.audit.kinds.registry.KINDS` (each kind module contributes `Request` and
`EXAMPLE`; app/audit/results/<kind>.py its typed `Result`)."""

from __future__ import annotations

import logging
from datetime import datetime
from functools import cache
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self, Union

from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from app.audit.kinds.base import AuditRequestBase
from app.audit.kinds.registry import KINDS, kind_module, result_model, validate_result
from app.audit.results.base import ResultBase
from app.audit.stats.verdict import OUTCOMES
from app.db.constants import CLAIM_FIELDS, AuditState

if TYPE_CHECKING:
    from app.db.models import Audit

log = logging.getLogger(__name__)


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


AuditResult = Annotated[
    Union[tuple(result_model(kind) for kind in KINDS)],  # noqa: UP007 - built at import from the registry
    Field(discriminator="kind"),
]
"""The typed result of any kind (`kind` tells which)."""


def typed_result(kind: str, result: dict[str, Any] | None) -> ResultBase | None:
    """A stored result as its kind's model; a row that no longer validates (stored before a field changed)
    is returned unvalidated with a warning rather than failing the read."""
    if result is None:
        return None
    try:
        return validate_result(kind, result)
    except ValidationError as exc:
        log.warning("stored %s result does not match its model (%s); returned as stored", kind, exc)
        return result_model(kind).model_construct(**{"kind": kind, **result})


class Progress(BaseModel):
    stage: str
    fraction: float = Field(ge=0.0, le=1.0)
    eta_seconds: float | None
    message: str


class ErrorInfo(BaseModel):
    code: str = Field(description="AUDIT_ERROR (the request cannot run), DEADLINE_EXCEEDED or INTERNAL.")
    message: str


class Verdict(BaseModel):
    """What the result concludes (the result holds the rest): its verdict, headline and two ε figures."""

    outcome: Literal["violation", "leak", "inconclusive", "consistent"] | None = Field(
        default=None,
        description="The result's `verdict`: violation, leak, inconclusive or consistent; null when the kind "
        "measures no leakage (iclinf).",
    )
    headline: str | None = Field(default=None, description="The verdict in plain words.")
    epsilon_lower: float | None = Field(
        description="The largest empirical ε lower bound the verdict used (`epsilon_lower` — the GDP or the "
        "assumption-free bound, as `assumption` says — else `epsilon_empirical`; for `mia` the larger of the "
        "black-box and white-box bounds); null when the kind reports none."
    )
    epsilon_detectable: float | None = Field(
        default=None,
        description="The audit's power (the result's `epsilon_detectable`); null when unbounded.",
    )
    violation: bool | None = Field(
        description="True when the verdict is violation; null when nothing is claimed (the verdict is judged "
        "against max_epsilon) or the kind makes no such comparison."
    )


def claims_nothing(result: dict[str, Any] | None) -> bool:
    """The result was judged with nothing claimed (against its `max_epsilon`, set only then: mia, bound),
    whatever ε the request carries (a mia request's `epsilon` defaults to 1 even with mechanism `none`)."""
    limit = result.get("max_epsilon") if isinstance(result, dict) else None
    return isinstance(limit, int | float) and not isinstance(limit, bool)


def verdict_of(result: dict[str, Any] | None) -> Verdict | None:
    if result is None:
        return None
    sides = [result, *(result.get(tm) for tm in ("black_box", "white_box"))]
    lows = [
        float(value)
        for side in sides
        if isinstance(side, dict)
        and isinstance(value := side.get("epsilon_lower", side.get("epsilon_empirical")), int | float)
    ]
    violation = result.get("violation")
    outcome = result.get("verdict")
    detectable = result.get("epsilon_detectable")
    return Verdict(
        outcome=outcome if outcome in OUTCOMES else None,
        headline=result.get("headline") if isinstance(result.get("headline"), str) else None,
        epsilon_lower=max(lows) if lows else None,
        epsilon_detectable=float(detectable) if isinstance(detectable, int | float) else None,
        violation=violation if isinstance(violation, bool) and not claims_nothing(result) else None,
    )


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

    @classmethod
    def of(cls, row: Any, epsilon_claimed: float | None = None) -> Self:
        """From an `Audit` or a row of app.db.polling's summary columns (which carry `epsilon_claimed`)."""
        if epsilon_claimed is None:
            epsilon_claimed = getattr(row, "epsilon_claimed", None)
        if row.state == AuditState.SUCCEEDED and claims_nothing(row.result):
            epsilon_claimed = None  # the verdict says nothing is claimed: no "claimed 1" beside a leak
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
            verdict=verdict_of(row.result) if row.state == AuditState.SUCCEEDED else None,
            error=ErrorInfo(**row.error) if row.error else None,
            cancel_requested=row.cancel_requested,
            attempt=row.attempt,
            created_at=row.created_at,
            updated_at=row.finished_at or max(t for t in times if t is not None),
            started_at=row.started_at,
            finished_at=row.finished_at,
        )


class AuditResource(AuditSummary):
    """The whole audit (`GET /v1/audits/{id}`, `view=full`): the summary plus the request and the result."""

    request: dict[str, Any]
    result: AuditResult | None = Field(
        description="The typed result once SUCCEEDED (its `kind` says which result schema); null before."
    )

    @classmethod
    def of(cls, audit: Audit, epsilon_claimed: float | None = None) -> Self:
        summary = AuditSummary.of(audit, epsilon_claimed or claimed_epsilon(audit.request))
        return cls(**dict(summary), request=audit.request, result=typed_result(audit.kind, audit.result))


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
