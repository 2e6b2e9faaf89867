"""The four verdicts an audit that measures leakage can reach (their rule: app/audit/stats/verdict.py), kept
apart from it so that the result models and their digest name them without loading the statistics."""

from __future__ import annotations

from typing import Literal

Outcome = Literal["violation", "leak", "inconclusive", "consistent"]
OUTCOMES: tuple[str, ...] = ("violation", "leak", "inconclusive", "consistent")
FAILING: frozenset[str] = frozenset({"violation", "leak"})
"""What fails a CI gate: a violation of the claimed ε, or a leak where nothing is claimed."""
