"""Attack `min_k_pp`. Min-K%++ (Zhang et al. 2025): Min-K% over token log-probabilities standardized by the model's next-token mean and spread, (log p_t − μ_t)/σ_t.

Formula, trials and soundness: app/audit/attacks/token_likelihood.py (plain ICL and the prompt defenses).
"""

from __future__ import annotations

from typing import Any

from app.audit.attacks.likelihood import LikelihoodTrials, build_query
from app.audit.attacks.token_likelihood import MECHANISMS, check_request, run_scored
from app.audit.runtime import RunContext

__all__ = ["MECHANISMS", "build_query", "check_request", "run_audit"]
SCORE = "min_k_pp"


def run_audit(request: Any, ctx: RunContext, trials: LikelihoodTrials | None = None) -> dict:
    """The audit with the `min_k_pp` score (token_likelihood.run_scored)."""
    return run_scored(request, ctx, SCORE, trials)
