"""`kind: "bound"` — a privacy lower bound from a membership test's outcomes, with no model or data.

Give either `counts` {tp, fn, fp, tn} (C1 trials split into true positives / false negatives, C0 into false
positives / true negatives), or the test's raw `scores_in` (C1) and `scores_out` (C0) — higher means
"canary present"; 0/1 values are read as black-box decisions — plus a `threshold_strategy`. The result is
the Gaussian-DP bound of 003 §2 (app/audit/bounds.py, app/audit/thresholds.py): μ_lower at joint
confidence γ, ε_empirical at δ, the point estimate log(TPR/FPR), and AUC when scores were given.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.audit.bounds import Counts, gdp_bound_from_counts
from app.audit.kinds.base import AuditRequestBase
from app.audit.runtime import RunContext
from app.audit.thresholds import bound_from_scores, strategy_from_name

MAX_SCORES = 2_000_000

EXAMPLE: dict = {
    "kind": "bound",
    "counts": {"tp": 2400, "fn": 1600, "fp": 1500, "tn": 2500},
    "confidence": 0.95,
    "delta": 1e-5,
}


class CountsIn(BaseModel):
    """Outcomes of the membership test."""

    model_config = ConfigDict(extra="forbid")

    tp: int = Field(ge=0, description="C1 (canary in) trials the test called 'in'.")
    fn: int = Field(ge=0, description="C1 trials the test called 'out'.")
    fp: int = Field(ge=0, description="C0 (canary out) trials the test called 'in'.")
    tn: int = Field(ge=0, description="C0 trials the test called 'out'.")

    @model_validator(mode="after")
    def _both_sides(self) -> CountsIn:
        if self.tp + self.fn == 0:
            raise ValueError("counts need at least one C1 trial: tp + fn must be > 0")
        if self.fp + self.tn == 0:
            raise ValueError("counts need at least one C0 trial: fp + tn must be > 0")
        return self


class Request(AuditRequestBase):
    kind: Literal["bound"] = "bound"
    counts: CountsIn | None = Field(default=None, description="The test's outcome counts.")
    scores_in: list[float] | None = Field(
        default=None, max_length=MAX_SCORES, description="Scores on C1 trials (higher = canary present)."
    )
    scores_out: list[float] | None = Field(
        default=None, max_length=MAX_SCORES, description="Scores on C0 trials (higher = canary present)."
    )
    threshold_strategy: Literal["split", "in_sample", "bonferroni"] = Field(
        default="split",
        description="How the score threshold is chosen: split (default, unbiased), in_sample (003's "
        "choice; biased upward), bonferroni (union bound over candidate thresholds).",
    )
    confidence: float = Field(default=0.95, gt=0, lt=1, description="Joint confidence γ of the lower bound.")
    delta: float = Field(default=1e-5, gt=0, lt=1, description="δ at which μ_lower is converted to ε.")

    @model_validator(mode="after")
    def _one_source(self) -> Request:
        has_scores = self.scores_in is not None or self.scores_out is not None
        if (self.counts is None) == (not has_scores):
            raise ValueError("give either counts or scores_in and scores_out (not both, not neither)")
        if has_scores:
            for name in ("scores_in", "scores_out"):
                if not getattr(self, name):
                    raise ValueError(f"{name} must be a non-empty list when scores are given")
            if self.threshold_strategy == "split" and min(len(self.scores_in), len(self.scores_out)) < 2:
                raise ValueError("the split threshold_strategy needs at least two scores on each side")
        return self


def run(request: Request, ctx: RunContext) -> dict:
    """Compute the bound; `biased: true` and a note when the threshold was chosen in-sample."""
    ctx.progress("bound", 0.0, "computing the privacy lower bound")
    if request.counts is not None:
        c = request.counts
        bound = gdp_bound_from_counts(
            Counts(tp=c.tp, fn=c.fn, fp=c.fp, tn=c.tn), confidence=request.confidence, delta=request.delta
        )
    else:
        bound = bound_from_scores(
            np.asarray(request.scores_in, dtype=np.float64),
            np.asarray(request.scores_out, dtype=np.float64),
            strategy=strategy_from_name(request.threshold_strategy, seed=request.seed),
            confidence=request.confidence,
            delta=request.delta,
        )
    result = bound.as_dict()
    if bound.biased:
        result["note"] = (
            "The threshold was chosen on the same scores the bound is computed from (in_sample), so the "
            "bound is optimistic; use split or bonferroni for a bound that keeps its confidence."
        )
    ctx.progress("bound", 1.0, "done")
    return result
