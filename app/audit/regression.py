"""A regression gate: has the leakage an audit measured risen above what a baseline audit measured?

For each membership test both results hold (mia: `black_box`, `white_box`; bound: the result itself), the
audit's lower bound on ε (`epsilon_lower`, the bound its verdict used) is compared with the baseline's
upper confidence bound on the ε of its test (stats.bounds.epsilon_upper_from_counts, from the baseline's
counts, at the baseline's confidence and δ, with the audit's assumption so that both bound the same
functional of a test's true rates). The test has regressed when the lower bound exceeds the upper one.

Statistics: if the two tests' true rates show the same ε, a regression is flagged only when the audit's
lower bound errs (probability ≤ 1 − γ_audit) or the baseline's upper bound does (≤ 1 − γ_baseline): a
false alarm has probability at most their sum, each γ the test's own confidence: 10 % for a `bound`
audit at 95 %, 5 % for a mia threat model of an audit with two (each at 97.5 %, its Bonferroni share).
What is compared is the attack as run, at its threshold: a stronger attack or a better threshold in the
new audit can flag a regression of the attack rather than of the system, and the baseline's upper bound
is not a bound on the system's ε (no audit gives one).
"""

from __future__ import annotations

import math
from typing import Any, cast

from app.audit.results.digest import bound_used
from app.audit.stats.bounds import Assumption, Counts, epsilon_upper_from_counts

DEFAULT_CONFIDENCE = 0.95
DEFAULT_DELTA = 1e-5


class RegressionError(ValueError):
    """The two results cannot be compared (no membership test in common)."""


def tests_of(result: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The membership tests of a result by name: its threat models' bounds (mia), else the result itself
    when it holds counts (bound)."""
    found = {
        name: side
        for name in ("black_box", "white_box")
        if isinstance(side := result.get(name), dict) and isinstance(side.get("counts"), dict)
    }
    if not found and isinstance(result.get("counts"), dict):
        found[str(result.get("kind") or "audit")] = result
    return found


def _number(*values: Any, default: float) -> float:
    for value in values:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return default


def _lower(test: dict[str, Any]) -> float | None:
    """The verdict's lower bound of a test (`bound_used`); ∞ when unbounded; None when the result has none."""
    lower, unbounded = bound_used(test)
    return math.inf if unbounded else lower


def _percent(confidence: float) -> str:
    return f"{100 * confidence:.4g} %"


def _shown(value: float) -> str:
    return "∞" if math.isinf(value) else f"{value:.3g}"


def compare(result: dict[str, Any], baseline: dict[str, Any]) -> dict[str, Any]:
    """The regression check of `result` against `baseline` (both stored results of one kind): one row per
    test both hold, `regressed` when any row's lower bound exceeds the baseline's upper bound."""
    ours, theirs = tests_of(result), tests_of(baseline)
    names = [name for name in ours if name in theirs]
    if not names:
        raise RegressionError(
            "the audit and its baseline share no membership test (a mia or bound audit of each, with counts)"
        )
    rows: list[dict[str, Any]] = []
    for name in names:
        test, base = ours[name], theirs[name]
        lower = _lower(test)
        if lower is None:
            continue
        stated = test.get("assumption") or result.get("assumption") or "gdp"
        assumption = cast(Assumption, stated)  # a stored result's: "gdp" or "none"
        confidence = _number(base.get("confidence"), baseline.get("confidence"), default=DEFAULT_CONFIDENCE)
        delta = _number(base.get("delta"), baseline.get("delta"), default=DEFAULT_DELTA)
        counts = Counts(**{k: int(base["counts"][k]) for k in ("tp", "fn", "fp", "tn")})
        upper = epsilon_upper_from_counts(counts, confidence=confidence, delta=delta, assumption=assumption)
        rows.append(
            {
                "name": name,
                "epsilon_lower": None if math.isinf(lower) else lower,
                "confidence": _number(
                    test.get("confidence"), result.get("confidence"), default=DEFAULT_CONFIDENCE
                ),
                "baseline_epsilon_upper": None if math.isinf(upper) else upper,
                "baseline_confidence": confidence,
                "assumption": assumption,
                "regressed": lower > upper,
            }
        )
    if not rows:
        raise RegressionError("the audit reports no lower bound on ε to compare")
    worst = max(
        rows, key=lambda r: (r["regressed"], math.inf if r["epsilon_lower"] is None else r["epsilon_lower"])
    )
    lower = math.inf if worst["epsilon_lower"] is None else worst["epsilon_lower"]
    upper = math.inf if worst["baseline_epsilon_upper"] is None else worst["baseline_epsilon_upper"]
    where = f" ({worst['name']})" if len(rows) > 1 else ""
    if worst["regressed"]:
        headline = (
            f"Regression{where}: measured ε ≥ {_shown(lower)} ({_percent(worst['confidence'])}), above the baseline's "
            f"ε ≤ {_shown(upper)} ({_percent(worst['baseline_confidence'])})"
        )
    else:
        headline = (
            f"No regression{where}: measured ε ≥ {_shown(lower)} is within the baseline's ε ≤ {_shown(upper)} "
            f"({_percent(worst['baseline_confidence'])})"
        )
    return {"regressed": any(r["regressed"] for r in rows), "headline": headline, "tests": rows}
