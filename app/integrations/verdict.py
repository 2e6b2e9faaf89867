"""The verdict fields of a result for a sweep's table, a schedule's run and a webhook: the result's own
`verdict`, `headline` and `epsilon_detectable` (app/audit/stats/verdict.py), with the measured and claimed ε of
its typed verdict rows (app/audit/results, `verdicts()`) folded into one — ε_lower the largest bound a
verdict used. The `calibration` row (the noise's exact ε against the claim: theory, no measurement) is not a
measured bound and is left out; it is reported apart, in the audit's own result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.audit.kinds.registry import validate_result
from app.audit.stats.verdict import FAILING


@dataclass(frozen=True)
class Verdict:
    epsilon_lower: float | None
    epsilon_theory: float | None
    violation: bool | None  # None: the kind makes no claim to violate (or there is no result)
    outcome: str | None = None  # violation, leak, inconclusive, consistent; None: no leakage measured
    headline: str | None = None
    epsilon_detectable: float | None = None

    @property
    def failing(self) -> bool:
        """A CI gate's failure: a violation or a leak."""
        return self.outcome in FAILING


def verdict_of(kind: str, result: dict[str, Any] | None) -> Verdict:
    if not result:
        return Verdict(None, None, None)
    try:
        typed = validate_result(kind, result)
        rows = [r for r in typed.verdicts() if r.name != "calibration"]
    except (KeyError, ValidationError, NotImplementedError):
        return Verdict(None, None, None)
    measured = [r.epsilon_empirical for r in rows if r.epsilon_empirical is not None]
    claimed = [r.epsilon_theory for r in rows if r.epsilon_theory is not None]
    return Verdict(
        epsilon_lower=max(measured) if measured else None,
        epsilon_theory=claimed[0] if claimed else None,
        violation=typed.verdict == "violation" if claimed else None,
        outcome=typed.verdict,
        headline=typed.headline,
        epsilon_detectable=typed.epsilon_detectable,
    )
