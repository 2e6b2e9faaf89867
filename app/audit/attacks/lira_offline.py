"""Attack `lira_offline`. Per-record reference calibration, LiRA offline style (Carlini et al. 2022): (loss − μ_r)/σ, μ_r from the record's reference contexts without it (the first half of its pairs, which are then not trials).

Formula, trials and soundness: app/audit/attacks/token_likelihood.py (plain ICL and the prompt defenses).
"""

from __future__ import annotations

from typing import Any

from app.audit.attacks.likelihood import LikelihoodTrials, build_query
from app.audit.attacks.token_likelihood import MECHANISMS, check_request, run_scored
from app.audit.runtime import RunContext

__all__ = ["MECHANISMS", "build_query", "check_request", "run_audit"]
SCORE = "lira_offline"


def run_audit(request: Any, ctx: RunContext, trials: LikelihoodTrials | None = None) -> dict:
    """The audit with the `lira_offline` score (token_likelihood.run_scored)."""
    return run_scored(request, ctx, SCORE, trials)
