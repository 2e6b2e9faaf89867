"""The verdict digest: what a result concludes in six fields, derived once here for every surface (the API's
summary and resource, webhooks, sweeps, schedules, MLflow). The list filter and the metrics read its
`outcome` in SQL, as the stored result's `verdict` (app/db/audits.py `stored_outcome`)."""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, Field

from app.audit.results.base import ResultBase
from app.audit.stats.outcomes import FAILING, OUTCOMES, Outcome


class Verdict(BaseModel):
    """What the result concludes (the result holds the rest): its verdict, headline and the ε it used."""

    outcome: Outcome | None = Field(
        default=None,
        description="The result's `verdict`: violation, leak, inconclusive or consistent; null when the kind "
        "measures no leakage (iclinf).",
    )
    headline: str | None = Field(default=None, description="The verdict in plain words.")
    epsilon_lower: float | None = Field(
        default=None,
        description="The largest empirical ε lower bound the verdict used (`epsilon_lower` — the GDP or the "
        "assumption-free bound, as `assumption` says — else `epsilon_empirical`; for `mia` the larger of the "
        "black-box and white-box bounds; the ε spent for synthetic_generation); null when the kind reports none.",
    )
    epsilon_theory: float | None = Field(
        default=None, description="The ε claimed (the verdict's threshold); null when nothing is claimed."
    )
    epsilon_detectable: float | None = Field(
        default=None,
        description="The audit's power (the result's `epsilon_detectable`); null when unbounded.",
    )
    violation: bool | None = Field(
        default=None,
        description="True when the verdict is violation; null when nothing is claimed (the verdict is judged "
        "against max_epsilon) or the kind makes no such comparison.",
    )

    @property
    def failing(self) -> bool:
        """A CI gate's failure: a violation or a leak."""
        return self.outcome in FAILING


def bound_used(test: Any) -> tuple[float | None, bool]:
    """(the lower bound on ε a membership test's verdict used, unbounded), from its fields (a model or a
    stored dict): `epsilon_lower`, else the bound its `assumption` names (`epsilon_empirical` under gdp,
    `epsilon_empirical_assumption_free` under none); unbounded when the data admit no finite bound."""

    def field(name: str, default: Any = None) -> Any:
        value = test.get(name) if isinstance(test, dict) else getattr(test, name, None)
        return default if value is None else value

    lower = field("epsilon_lower")
    if lower is None:
        free = field("assumption", "gdp") == "none"
        lower = field("epsilon_empirical_assumption_free" if free else "epsilon_empirical")
    unbounded = lower is None and bool(
        field("epsilon_lower_unbounded") or field("epsilon_empirical_unbounded")
    )
    finite = isinstance(lower, int | float) and math.isfinite(lower)
    return (float(lower) if finite else None), unbounded


def claims_nothing(result: ResultBase | dict[str, Any] | None) -> bool:
    """Judged with nothing claimed, against `max_epsilon` (set only then: mia, bound), whatever ε the
    request carries (a mia request's `epsilon` defaults to 1 even with mechanism `none`)."""
    limit = result.get("max_epsilon") if isinstance(result, dict) else getattr(result, "max_epsilon", None)
    return isinstance(limit, int | float) and not isinstance(limit, bool)


def digest(result: ResultBase) -> Verdict:
    """The digest of a typed result: its outcome and headline as stored, ε_lower the largest bound a verdict
    row used and ε_theory their claim; `violation` only where something is claimed. The `calibration` row (the
    noise's exact ε against the claim: theory, no measurement) is not a measured bound and is left out. A
    stored result that no longer validates (its rows cannot be read) keeps its outcome and headline."""
    try:
        rows = [r for r in result.verdicts() if r.name != "calibration"]
    except (NotImplementedError, AttributeError, TypeError):
        rows = []
    measured = [r.epsilon_empirical for r in rows if r.epsilon_empirical is not None]
    claimed = (
        None
        if claims_nothing(result)
        else next((r.epsilon_theory for r in rows if r.epsilon_theory is not None), None)
    )
    detectable = result.epsilon_detectable
    return Verdict(
        outcome=result.verdict if result.verdict in OUTCOMES else None,
        headline=result.headline if isinstance(result.headline, str) else None,
        epsilon_lower=max(measured) if measured else None,
        epsilon_theory=claimed,
        epsilon_detectable=detectable if isinstance(detectable, int | float) else None,
        violation=result.violated if claimed is not None else None,
    )
