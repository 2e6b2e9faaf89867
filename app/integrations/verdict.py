"""The verdict fields of a result for a sweep's table and a webhook: the typed result's own verdict rows
(app/audit/results, `verdicts()`: the lower bound each verdict compared, the claimed ε, violation)
folded into one — ε_lower the largest bound a verdict used, violation if any row is one. The `calibration`
row (the noise's exact ε against the claim: theory, no measurement) is not a measured bound and is left
out; it is reported apart, in the audit's own result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from app.audit.kinds.registry import validate_result


@dataclass(frozen=True)
class Verdict:
    epsilon_lower: float | None
    epsilon_theory: float | None
    violation: bool | None  # None: the kind makes no claim to violate (or there is no result)


def verdict_of(kind: str, result: dict[str, Any] | None) -> Verdict:
    if not result:
        return Verdict(None, None, None)
    try:
        rows = [r for r in validate_result(kind, result).verdicts() if r.name != "calibration"]
    except (KeyError, ValidationError, NotImplementedError):
        return Verdict(None, None, None)
    measured = [r.epsilon_empirical for r in rows if r.epsilon_empirical is not None]
    claimed = [r.epsilon_theory for r in rows if r.epsilon_theory is not None]
    return Verdict(
        epsilon_lower=max(measured) if measured else None,
        epsilon_theory=claimed[0] if claimed else None,
        violation=any(r.violation for r in rows) if claimed else None,
    )
