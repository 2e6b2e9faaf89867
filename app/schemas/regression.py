"""`GET /v1/audits/{id}/regression?baseline=…`: the audit's measured lower bounds against a baseline
audit's upper confidence bounds (app/audit/regression.py says what is compared, at what confidence)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RegressionTest(BaseModel):
    name: str = Field(description="The membership test: black_box or white_box (mia), bound (bound).")
    epsilon_lower: float | None = Field(
        description="The audit's lower bound on ε (the one its verdict used); null when unbounded."
    )
    confidence: float = Field(description="The confidence of that lower bound.")
    baseline_epsilon_upper: float | None = Field(
        description="Upper confidence bound on the ε of the baseline's test (its true rates, at its threshold), "
        "from its counts; null when unbounded (no error of one kind seen)."
    )
    baseline_confidence: float = Field(description="The confidence of that upper bound (the baseline's).")
    assumption: str = Field(description="The functional both bounds are of: gdp or none (assumption-free).")
    regressed: bool = Field(description="True when epsilon_lower exceeds baseline_epsilon_upper.")


class Regression(BaseModel):
    audit_id: str
    baseline_id: str
    regressed: bool = Field(description="True when any test regressed: the measured leakage rose.")
    headline: str = Field(description="The comparison in plain words.")
    tests: list[RegressionTest]
