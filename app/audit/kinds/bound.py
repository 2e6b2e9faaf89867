"""`kind: "bound"` — a privacy lower bound from a membership test's outcomes, with no model or data.

Give either `counts` {tp, fn, fp, tn} (C1 trials split into true positives / false negatives, C0 into false
positives / true negatives), or the test's raw `scores_in` (C1) and `scores_out` (C0) — higher means
"canary present"; 0/1 values are read as black-box decisions — plus a `threshold_strategy`. The result has
both lower bounds of app/audit/stats/bounds.py at joint confidence γ: `epsilon_empirical` (the Gaussian-DP route
of 003 §2, via μ_lower) and `epsilon_empirical_assumption_free` (ε ≥ ln((TPR_lower − δ)/FPR_upper) and its
mirror), the point estimate log(TPR/FPR), and AUC when scores were given.

`assumption` picks the bound the verdict uses (`epsilon_lower`, and `violation` against a claimed
`epsilon`). It defaults to "none": this kind gets counts or scores from an unknown mechanism, and the GDP
route is a valid lower bound only when the mechanism's privacy curve is Gaussian — for any other it can
overstate ε (randomized response at exactly (1, 0)-DP: TPR 0.731 / FPR 0.269 → GDP ε = 5.58, a false
violation). Ask for "gdp" only when the mechanism is a Gaussian mechanism (or its post-processing).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_validator

from app.audit.accounting import MAX_EPSILON, MIN_DELTA
from app.audit.kinds.base import AuditRequestBase
from app.audit.results.bound import BoundAuditResult
from app.audit.runtime import RunContext
from app.audit.stats.bounds import Assumption, Counts, gdp_bound_from_counts
from app.audit.stats.next_steps import membership
from app.audit.stats.thresholds import bound_from_scores, strategy_from_name
from app.audit.stats.verdict import judge, membership_test

MAX_SCORES = 2_000_000

EXAMPLE: dict = {
    "kind": "bound",
    "counts": {"tp": 2400, "fn": 1600, "fp": 1500, "tn": 2500},
    "confidence": 0.95,
    "delta": 1e-5,
}


class CountsIn(BaseModel):
    """Outcomes of the membership test."""

    # The schema states what _both_sides checks: at least one C1 trial (tp or fn > 0) and one C0 trial.
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "allOf": [
                {"anyOf": [{"properties": {"tp": {"minimum": 1}}}, {"properties": {"fn": {"minimum": 1}}}]},
                {"anyOf": [{"properties": {"fp": {"minimum": 1}}}, {"properties": {"tn": {"minimum": 1}}}]},
            ]
        },
    )

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


_SCORES = {"type": "array", "minItems": 1}
_NOT_SPLIT = {"type": "string", "enum": ["in_sample", "bonferroni"]}

# The schema states what _one_source checks: counts, or scores_in and scores_out (not both,
# not neither; an absent or null field is not given), each non-empty, with at least two scores on each side
# under the split threshold_strategy (the default).
SOURCE_SCHEMA: dict = {
    "anyOf": [
        {
            "required": ["counts"],
            "properties": {"counts": {"type": "object"}, "scores_in": {"type": "null"}, "scores_out": {"type": "null"}},
        },
        {
            "required": ["scores_in", "scores_out", "threshold_strategy"],
            "properties": {"counts": {"type": "null"}, "scores_in": _SCORES, "scores_out": _SCORES,
                           "threshold_strategy": _NOT_SPLIT},
        },
        {
            "required": ["scores_in", "scores_out"],
            "properties": {"counts": {"type": "null"}, "scores_in": {**_SCORES, "minItems": 2},
                           "scores_out": {**_SCORES, "minItems": 2}},
        },
    ]
}  # fmt: skip


class Request(AuditRequestBase):
    model_config = ConfigDict(json_schema_extra=SOURCE_SCHEMA)

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
    confidence: float = Field(
        default=0.95,
        ge=0.5,
        lt=1,
        description="Joint confidence γ of the lower bound, in [0.5, 1): below ½ a bound errs more often than it "
        "holds.",
    )
    delta: float = Field(
        default=1e-5, ge=MIN_DELTA, lt=1, description="δ of both bounds (μ_lower is converted to ε at δ)."
    )
    assumption: Assumption = Field(
        default="none",
        description="The bound the verdict uses: none (default; assumption-free, valid for any mechanism) or "
        "gdp (only when the mechanism is known to be Gaussian; it can overstate ε for any other).",
    )
    epsilon: float | None = Field(
        default=None,
        gt=0,
        le=MAX_EPSILON,
        description="The ε the audited system claims; with it, `violation` says whether the chosen lower "
        "bound exceeds it (null without a claim, or with the biased in_sample threshold).",
    )

    max_epsilon: float = Field(
        default=0.0,
        ge=0,
        le=MAX_EPSILON,
        description="Without a claimed epsilon: the leakage allowed before the verdict is `leak` (0: any "
        "leakage shown at the stated confidence). Ignored under a claim.",
    )

    @model_validator(mode="after")
    def _one_source(self) -> Request:
        has_scores = self.scores_in is not None or self.scores_out is not None
        if (self.counts is None) == (not has_scores):
            raise ValueError("give either counts or scores_in and scores_out (not both, not neither)")
        if has_scores:
            if not self.scores_in or not self.scores_out:
                name = "scores_out" if self.scores_in else "scores_in"
                raise ValueError(f"{name} must be a non-empty list when scores are given")
            if self.threshold_strategy == "split" and min(len(self.scores_in), len(self.scores_out)) < 2:
                raise ValueError("the split threshold_strategy needs at least two scores on each side")
        return self


def run(request: Request, ctx: RunContext) -> BoundAuditResult:
    """Compute both bounds; `epsilon_lower` is the one `assumption` names, `violation` compares it with the
    claimed `epsilon`; `biased: true`, a note and no verdict when the threshold was chosen in-sample."""
    ctx.progress("bound", 0.0, "computing the privacy lower bound")
    common: dict[str, Any] = {
        "confidence": request.confidence,
        "delta": request.delta,
        "assumption": request.assumption,
    }
    scores_in, scores_out = request.scores_in or [], request.scores_out or []  # empty with counts
    if request.counts is not None:
        c = request.counts
        bound = gdp_bound_from_counts(Counts(tp=c.tp, fn=c.fn, fp=c.fp, tn=c.tn), **common)
    else:
        bound = bound_from_scores(
            np.asarray(scores_in, dtype=np.float64),
            np.asarray(scores_out, dtype=np.float64),
            strategy=strategy_from_name(request.threshold_strategy, seed=request.seed),
            **common,
        )
    result = bound.as_dict()
    if request.counts is None:
        result["scored"] = {"in": len(scores_in), "out": len(scores_out)}
        top_out = max(scores_out)
        result["above_every_out"] = sum(s > top_out for s in scores_in)
    result["epsilon_claimed"] = request.epsilon
    result["max_epsilon"] = request.max_epsilon if request.epsilon is None else None
    threshold = request.epsilon if request.epsilon is not None else request.max_epsilon
    test = membership_test(
        "bound", result, delta=request.delta, confidence=request.confidence, threshold=threshold
    )
    judgement = judge(
        [test],
        claimed=request.epsilon,
        max_epsilon=request.max_epsilon,
        confidence=request.confidence,
        auc=result.get("auc"),
    )
    result.update(judgement.as_dict())
    result["violation"] = judgement.verdict == "violation" if request.epsilon is not None else None
    given = request.counts.tp + request.counts.fn if request.counts is not None else len(scores_in)
    steps = membership(
        request, result, [test], claimed=request.epsilon, field=None, units=given, seconds=None
    )
    if steps:
        result["next_steps"] = steps
    if bound.biased:
        result["note"] = (
            "The threshold was chosen on the same scores the bound is computed from (in_sample), so the "
            "bound is optimistic and gives no violation verdict; use split or bonferroni for a bound that "
            "keeps its confidence."
        )
    ctx.progress("bound", 1.0, "done")
    return BoundAuditResult.model_validate(result)
