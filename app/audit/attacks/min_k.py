"""Attack `min_k`. Min-K% Prob (Shi et al. 2024): the mean of the 20 % lowest token log-probabilities of the record's secret.

Formula, trials and soundness: app/audit/attacks/token_likelihood.py (plain ICL and the prompt defenses).
"""

from __future__ import annotations

from typing import Any

from app.audit.attacks.likelihood import LikelihoodTrials, build_query
from app.audit.attacks.token_likelihood import MECHANISMS, check_request, run_scored
from app.audit.runtime import RunContext

__all__ = ["MECHANISMS", "build_query", "check_request", "run_audit"]
SCORE = "min_k"


def run_audit(request: Any, ctx: RunContext, trials: LikelihoodTrials | None = None) -> dict:
    """The audit with the `min_k` score (token_likelihood.run_scored)."""
    return run_scored(request, ctx, SCORE, trials)
