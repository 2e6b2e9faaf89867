"""The result of a `bound` audit: a privacy lower bound from a membership test's outcomes."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.audit.results.base import (
    ASSUMPTION,
    EPSILON_ASSUMPTION_FREE,
    EPSILON_EMPIRICAL,
    EPSILON_POINT,
    OutcomeCounts,
    ResultBase,
    VerdictRow,
)
from app.audit.results.digest import bound_used


class BoundAuditResult(ResultBase):
    """How much a system leaks at least, from the outcomes (or scores) of one membership test."""

    kind: Literal["bound"] = "bound"
    tpr: float = Field(description="True-positive rate: share of canary-in (C1) trials the test called 'in'.")
    fpr: float = Field(description="False-positive rate: share of canary-out (C0) trials called 'in'.")
    mu_lower: float = Field(
        description="Lower bound on the Gaussian-DP parameter μ at the audit's confidence (0 = no leak shown)."
    )
    epsilon_empirical: float | None = Field(description=EPSILON_EMPIRICAL)
    epsilon_empirical_unbounded: bool | None = Field(
        default=None, description="True when the data admit no finite bound (epsilon_empirical is null)."
    )
    epsilon_empirical_assumption_free: float | None = Field(default=None, description=EPSILON_ASSUMPTION_FREE)
    assumption: Literal["gdp", "none"] | None = Field(default=None, description=ASSUMPTION)
    epsilon_point: float | None = Field(default=None, description=EPSILON_POINT)
    epsilon_point_unbounded: bool | None = Field(
        default=None, description="True when FPR = 0, so log(TPR/FPR) is infinite (epsilon_point is null)."
    )
    threshold: float | None = Field(
        default=None, description="Score at or above which the test says 'in' (null when counts were given)."
    )
    threshold_strategy: str | None = Field(
        default=None,
        description="How the threshold was chosen: split (on half the scores, bound on the other half), "
        "in_sample (on all of them; optimistic) or bonferroni (every candidate, confidence shared).",
    )
    auc: float | None = Field(
        default=None,
        description="Area under the test's ROC curve (0.5 = guessing); only when scores were given.",
    )
    accuracy: float | None = Field(default=None, description="Share of all trials the test called right.")
    confidence: float | None = Field(
        default=None, description="Probability with which the lower bounds hold (jointly)."
    )
    delta: float | None = Field(default=None, description="The δ at which ε is stated.")
    n_in: int | None = Field(default=None, description="Number of canary-in (C1) trials.")
    n_out: int | None = Field(default=None, description="Number of canary-out (C0) trials.")
    counts: OutcomeCounts | None = Field(default=None, description="The test's decisions behind the bound.")
    biased: bool | None = Field(
        default=None,
        description="True when the threshold was chosen on the same scores the bound uses (in_sample): the "
        "bound is then optimistic.",
    )
    epsilon_lower: float | None = Field(
        default=None,
        description="The lower bound the verdict uses: epsilon_empirical under assumption gdp, "
        "epsilon_empirical_assumption_free under none.",
    )
    epsilon_claimed: float | None = Field(
        default=None, description="The ε the request says the system claims (null: no claim, no verdict)."
    )
    violation: bool | None = Field(
        default=None,
        description="True when the verdict is violation (epsilon_lower exceeds epsilon_claimed with an "
        "unbiased threshold); null when no ε was claimed.",
    )
    note: str | None = Field(default=None, description="A caveat about this result, when there is one.")
    max_epsilon: float | None = Field(
        default=None, description="The leakage allowed without a claim (null under a claim)."
    )

    def verdicts(self) -> list[VerdictRow]:
        """One row; without a claimed ε a bound is never a violation."""
        detail = "" if self.epsilon_claimed is not None else "lower bound only; no claimed ε"
        return [VerdictRow("bound", bound_used(self)[0], self.epsilon_claimed, bool(self.violation), detail)]


Result = BoundAuditResult


# The output of a real run of examples/bound-counts.json (shown in the OpenAPI document as the example result).
EXAMPLE: dict[str, Any] = {
    "tpr": 0.6,
    "fpr": 0.375,
    "mu_lower": 0.4924981157567598,
    "epsilon_empirical": 1.9597372710838996,
    "epsilon_empirical_assumption_free": 0.40425557088244524,
    "epsilon_point": 0.47000362924573547,
    "threshold": None,
    "threshold_strategy": "counts",
    "auc": None,
    "accuracy": 0.6125,
    "confidence": 0.95,
    "delta": 1e-05,
    "n_in": 4000,
    "n_out": 4000,
    "counts": {"tp": 2400, "fn": 1600, "fp": 1500, "tn": 2500},
    "assumption": "none",
    "epsilon_lower": 0.40425557088244524,
    "biased": False,
    "epsilon_claimed": None,
    "violation": None,
}
