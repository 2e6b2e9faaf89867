"""Attack `blind`. The blind baseline (Das, Zhang & Tramèr 2024): a score of the record's text alone, never of the model's output; with each record on both sides it cannot separate C1 from C0, so a plain-ICL number above it is not distribution shift.

Formula, trials and soundness: app/audit/attacks/token_likelihood.py (plain ICL and the prompt defenses).
"""

from __future__ import annotations

from typing import Any

from app.audit.attacks.likelihood import LikelihoodTrials, build_query
from app.audit.attacks.token_likelihood import MECHANISMS, check_request, run_scored
from app.audit.runtime import RunContext

__all__ = ["MECHANISMS", "build_query", "check_request", "run_audit"]
SCORE = "blind"


def run_audit(request: Any, ctx: RunContext, trials: LikelihoodTrials | None = None) -> dict:
    """The audit with the `blind` score (token_likelihood.run_scored)."""
    return run_scored(request, ctx, SCORE, trials)
