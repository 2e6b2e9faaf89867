"""The auditor of a membership audit: one object over (C1, C0) scores that holds the threshold strategy,
the per-test confidence, δ, the bound the verdict uses and the claim (jax-privacy's auditor over in/out
scores), so a threat model's bound is one straight call instead of a walk through thresholds, bounds and
the GDP conversion.

`Auditor.for_request` reads them off a mia request: the assumption (`gdp` only for a known Gaussian
mechanism unless the request says otherwise, 003 §2), the Bonferroni share of the stated confidence over
the threat models (bounds.per_test_confidence), the seeded split (seeds.py's `threshold` stream).
`bound(scores_in, scores_out)` returns the threat model's result fields; `judge(fields)` adds the verdict's
bound (`epsilon_lower`, bounds.verdict_epsilon) and whether it exceeds the claim.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

from app.audit.seeds import SeedTree
from app.audit.stats.bounds import Assumption, PrivacyBound, per_test_confidence, verdict_epsilon
from app.audit.stats.thresholds import Split, ThresholdStrategy, bound_from_scores, strategy_from_name

THREAT_MODELS = ("black_box", "white_box")
_KEPT = (
    "tpr",
    "fpr",
    "mu_lower",
    "epsilon_empirical",
    "epsilon_empirical_assumption_free",
    "epsilon_point",
    "threshold",
    "auc",
    "accuracy",
)


def assumption_for(requested: str, gaussian: bool) -> Assumption:
    """The bound the verdict uses: GDP only for a known Gaussian mechanism, unless the request says."""
    if requested == "auto":
        return "gdp" if gaussian else "none"
    return requested  # type: ignore[return-value]


@dataclass(frozen=True)
class Auditor:
    """Strategy, per-test confidence, δ, assumption and claim of the tests behind one verdict."""

    strategy: ThresholdStrategy
    confidence: float | None  # per test; None for population rates (the exact estimator)
    delta: float
    assumption: Assumption
    claimed: float | None
    threat_models: tuple[str, ...]
    slack: float = 0.0  # exact population values: float noise only

    @classmethod
    def for_request(cls, request: Any, *, gaussian: bool, claimed: float | None, seeds: SeedTree) -> Auditor:
        tm = request.attack.threat_model
        models = THREAT_MODELS if tm == "both" else (tm,)
        strategy = strategy_from_name(request.threshold_strategy)
        if isinstance(strategy, Split):
            strategy = Split(fraction=strategy.fraction, seed=seeds.integer("threshold"))
        exact = getattr(request, "estimator", None) == "exact"
        return cls(
            strategy=strategy,
            confidence=None if exact else per_test_confidence(request.confidence, len(models)),
            delta=request.delta,
            assumption=assumption_for(request.assumption, gaussian),
            claimed=claimed,
            threat_models=models,
            slack=1e-9 if exact else 0.0,
        )

    @property
    def confidence_split(self) -> dict:
        """How the stated confidence is shared among the tests (the result's `confidence` minus `stated`)."""
        many = len(self.threat_models) > 1 and self.confidence is not None
        return {
            "per_test": self.confidence,
            "tests": list(self.threat_models),
            "correction": "bonferroni" if many else "none",
        }

    def bound(self, scores_in: np.ndarray, scores_out: np.ndarray) -> dict:
        """One threat model's fields from its scores: both lower bounds at the chosen threshold, the counts
        behind them, and the verdict's bound (`judge`)."""
        assert self.confidence is not None, "the exact estimator has population rates, not scores"
        bound = bound_from_scores(
            scores_in,
            scores_out,
            strategy=self.strategy,
            confidence=self.confidence,
            delta=self.delta,
            assumption=self.assumption,
        )
        fields = _fields(bound)
        fields["scored"] = {"in": int(scores_in.size), "out": int(scores_out.size)}
        fields["above_every_out"] = int(np.count_nonzero(scores_in > np.max(scores_out)))
        return self.judge(fields)

    def judge(self, fields: dict) -> dict:
        """`fields` with the assumption, the per-test confidence, `epsilon_lower` (∞ reported as
        `epsilon_lower_unbounded`) and `violation`: the bound exceeds the claim with a threshold not
        chosen on the trials it is computed from (`biased`: in_sample)."""
        lower = verdict_epsilon(_lower_bounds(fields), self.assumption)
        fields["assumption"], fields["confidence"] = self.assumption, self.confidence
        fields["epsilon_lower"] = lower if math.isfinite(lower) else None
        if not math.isfinite(lower):
            fields["epsilon_lower_unbounded"] = True
        exceeds = self.claimed is not None and lower > self.claimed + self.slack
        fields["violation"] = exceeds and not fields.get("biased", False)
        return fields


def _fields(bound: PrivacyBound) -> dict:
    """The per-threat-model fields of a bound (+ `*_unbounded` flags and the counts behind them)."""
    full = bound.as_dict()
    out = {k: full[k] for k in _KEPT}
    out.update({k: v for k, v in full.items() if k.endswith("_unbounded")})
    out["threshold_strategy"] = bound.threshold_strategy
    out["biased"] = bound.biased
    c = bound.counts
    out["counts"] = {"tp": c.tp, "fn": c.fn, "fp": c.fp, "tn": c.tn}
    return out


def _lower_bounds(fields: dict) -> SimpleNamespace:
    """A bound's two lower bounds read back from its fields (∞ where reported unbounded)."""
    keys = ("epsilon_empirical", "epsilon_empirical_assumption_free")
    return SimpleNamespace(**{k: math.inf if fields.get(k) is None else float(fields[k]) for k in keys})
