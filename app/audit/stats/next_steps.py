"""What would make an audit answer: `result.next_steps`, computed from the audit's own measurements.

Every `inconclusive` result carries at least one step, and any result whose per-record test cannot flag a
single record carries the step that would let it. A step is {"why", "set", "epsilon_detectable", "seconds",
"text"}: `set` the request fields (dotted paths) to change, or null when no field of the request does it;
`epsilon_detectable` the verdict's power model's ε_detectable once the step is taken (null: unknown
before it runs); `seconds` the expected wall time of the rerun (null: not known here). Sources:

- `under_powered`: the smallest trials (or contexts per record) at which the verdict's own power model —
  the same tests, η, confidence and threshold strategy, with their trials scaled — gives ε_detectable ≤
  POWER_FACTOR × the threshold, the rule `consistent` needs (ε_detectable is always above the threshold
  itself). Seconds: the run's own wall time scaled with its trials where calls made per trial are its
  cost (the direct estimator or an audit over several canaries, on a model or an endpoint), else null.
  When no number of trials can (η·μ(1.5 × threshold) never clears μ(threshold)), the step says the
  least η an attack would need instead.
- `weak signal`: a measured η whose lower bound is 0 while the score's AUC is above ½: the same
  projection at η's point estimate (the rerun measures η again).
- `no_signal`: η = 0 — what the canary measured (its P(y+) with and without it), and the request fields
  that change what the audit can see: teachers read by the label's log-probabilities
  (`mechanism.teacher_output`) for private voting, the noise alone with `model: oracle`.
- `budget`: a cap stopped the audit: the cap that would finish, spent × (needed / done).
- `records`: no record can be flagged — the sign test's smallest p over c contexts, 2^−c, is above its
  Bonferroni level (1 − confidence)/records: the smallest c with 2^−c ≤ that level.
- the verdict's other reasons (an in-sample threshold, a canary no partition held, nothing allowed).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from app.audit.stats.thresholds import bonferroni_tests
from app.audit.stats.verdict import (
    DETECT_PROBABILITY,
    POWER_FACTOR,
    MembershipTest,
    detection_rate,
    epsilon_detectable,
    fmt,
)

MAX_TRIALS = 8_000_000
"""The most trials (per context) an under-powered step proposes; beyond it the step says so."""
BISECTION_TOLERANCE = 0.005
"""epsilon_detectable's relative precision (stats/verdict.py's bisection to 0.5 %)."""
MAX_CONTEXTS = 1000
"""The most contexts per record a request may ask for (mia's `attack.contexts`)."""
NO_REACTION = 0.005
"""P(y+) below this with and without the canary: the model does not react to it."""
CAPS = {"max_calls": "calls", "max_tokens": "tokens", "max_seconds": "seconds"}


@dataclass(frozen=True)
class Step:
    """One next step (the module docstring)."""

    why: str
    set: dict[str, Any] | None
    text: str
    epsilon_detectable: float | None = None
    seconds: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def scaled(test: MembershipTest, factor: float) -> MembershipTest:
    """The same test with its trials scaled by `factor` (its Bonferroni candidates recounted)."""
    if test.n_in is None or test.n_out is None:
        return test
    n_in, n_out = max(1, round(test.n_in * factor)), max(1, round(test.n_out * factor))
    tests = bonferroni_tests(n_out) if test.tests > 1 else 1
    return dataclasses.replace(test, n_in=n_in, n_out=n_out, tests=tests)


def _answers_unlimited(test: MembershipTest, efficiency: float, goal: float, threshold: float) -> bool:
    """Whether the test with infinitely many trials (its population rates) at `efficiency` flags a system
    of true ε = goal: the most any number of trials can give."""
    population = dataclasses.replace(test, n_in=None, n_out=None, efficiency=efficiency)
    return detection_rate(population, goal, threshold) >= DETECT_PROBABILITY


def efficiency_needed(tests: Sequence[MembershipTest], threshold: float) -> float | None:
    """The least attack efficiency η (to 1 %) at which some test, with unlimited trials, could answer;
    None when even η = 1 could not."""
    goal = POWER_FACTOR * threshold * (1 - BISECTION_TOLERANCE)
    usable = [t for t in tests if not t.biased]

    def answers(eta: float) -> bool:
        return any(_answers_unlimited(t, eta, goal, threshold) for t in usable)

    if not answers(1.0):
        return None
    lo, hi = 0.0, 1.0
    while hi - lo > 0.01:
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if answers(mid) else (mid, hi)
    return hi


def units_needed(tests: Sequence[MembershipTest], units: int, threshold: float, limit: int) -> int | None:
    """The smallest units (trials, or contexts per record; to 5 %), from `units` (what the audit ran) up
    to `limit` (None beyond), at which the verdict answers: some test flags a system of true ε = goal =
    POWER_FACTOR × threshold with probability ≥ DETECT_PROBABILITY — ε_detectable ≤ goal by its definition,
    one detection rate per candidate instead of a search over ε (the goal less ε_detectable's 0.5 %
    bisection tolerance, so the ε it reports is within the goal too)."""
    goal = POWER_FACTOR * threshold * (1 - BISECTION_TOLERANCE)
    usable = [t for t in tests if not t.biased]

    def answers(n: int) -> bool:
        return any(
            detection_rate(scaled(t, n / units), goal, threshold) >= DETECT_PROBABILITY for t in usable
        )

    if not any(_answers_unlimited(t, t.efficiency, goal, threshold) for t in usable):
        return None  # not even population rates (infinitely many trials) answer at this η
    lo, hi = units, units
    while not answers(hi):
        if hi >= limit:
            return None
        lo, hi = hi, min(hi * 4, limit)
    while hi - lo > 1 and hi > 1.05 * lo:  # to 5 %, halving the ratio (not the gap)
        mid = max(lo + 1, min(hi - 1, round(math.sqrt(lo * hi))))
        lo, hi = (lo, mid) if answers(mid) else (mid, hi)
    return hi


def detectable_best(tests: Sequence[MembershipTest], factor: float, threshold: float) -> float:
    """ε_detectable, at trials scaled by `factor`, of the test most likely to flag a system at POWER_FACTOR ×
    the threshold (one search over ε, not one per test: the verdict's, the least of them, is at most it)."""
    usable = [scaled(t, factor) for t in tests if not t.biased]
    if not usable:
        return math.inf
    goal = POWER_FACTOR * threshold
    best = max(usable, key=lambda t: detection_rate(t, goal, threshold))
    return epsilon_detectable(best, threshold)


def _seconds(seconds: float | None, factor: float) -> float | None:
    return None if seconds is None else round(seconds * factor, 1)


def under_powered(
    tests: Sequence[MembershipTest],
    threshold: float,
    *,
    field: str | None,
    units: int,
    seconds: float | None,
    target: str,
    limit: int = MAX_TRIALS,
) -> Step:
    """The under-powered step: `field` (None: a bound's trials per side, no request field) set to the
    smallest units that let the audit answer."""
    goal = POWER_FACTOR * threshold
    needed = units_needed(tests, units, threshold, limit)
    why = f"under-powered: ε_detectable > {fmt(goal)} ({fmt(POWER_FACTOR)} × the {target})"
    name = field or "trials per side"
    if needed is None:
        eta = max((t.efficiency for t in tests if not t.biased), default=0.0)
        least = efficiency_needed(tests, threshold)
        limited = (
            f"an attack seeing η ≥ {least:.2f} of the signal (this one: {eta:.2g}) is what it needs"
            if least is not None
            else "no attack could, at this confidence"
        )
        text = f"raising {name} (up to {limit:,}) cannot bring ε_detectable to {fmt(goal)}: {limited}"
        return Step(why, None, text)
    eps = detectable_best(tests, needed / units, threshold)
    when = _seconds(seconds, needed / units)
    cost = f" (≈ {when:.0f} s)" if when is not None else ""
    verb = "set" if field else "collect"
    text = (
        f"{verb} {name} = {needed:,} (now {units:,}): ε_detectable {fmt(eps)} ≤ {fmt(goal)}, enough to "
        f"answer against the {target}{cost}"
    )
    return Step(why, {field: needed} if field else None, text, eps if math.isfinite(eps) else None, when)


def budget_step(
    stopped: dict, spent: dict | None, *, done: int, needed: int, unit: str, eps: float | None = None
) -> Step | None:
    """The cap that would let a stopped audit finish: what it spent × (needed / done)."""
    cap = stopped.get("cap")
    key = CAPS.get(str(cap))
    if key is None or not spent or done <= 0 or spent.get(key) is None:
        return None
    factor = needed / done
    value = math.ceil(float(spent[key]) * factor)
    when = _seconds(spent.get("seconds"), factor)
    text = (
        f"set budget.{cap} = {value:,}: it finished {done:,} of {needed:,} {unit} on "
        f"{fmt(float(spent[key]))} {key}"
    )
    return Step(f"stopped by budget.{cap}", {f"budget.{cap}": value}, text, eps, when)


def records_step(records: Sequence[dict], confidence: float, seconds: float | None) -> Step | None:
    """The contexts per record that make a per-record flag possible (records.py's sign test at its
    Bonferroni level); None when a flag is already possible."""
    if not records:
        return None
    alpha = (1 - confidence) / len(records)
    contexts = max(int(r.get("trials") or 0) for r in records)
    if contexts > 0 and 0.5**contexts <= alpha:
        return None
    needed = max(1, math.ceil(math.log2(1 / alpha)))
    while 0.5**needed > alpha:  # float guard on the logarithm
        needed += 1
    text = (
        f"set attack.contexts = {needed} (now {contexts}): with {contexts} contexts per record the sign "
        f"test's smallest p is {0.5**contexts:.3g}, above {alpha:.2g} = (1 − {confidence:g}) / "
        f"{len(records)} records, so no record can be flagged"
    )
    when = _seconds(seconds, needed / contexts) if contexts else None
    return Step("per-record flags cannot fire", {"attack.contexts": needed}, text, None, when)


def point_estimate(
    tests: Sequence[MembershipTest],
    result: dict,
    threshold: float,
    *,
    field: str | None,
    units: int,
    seconds: float | None,
    limit: int,
    target: str,
) -> Step | None:
    """A measured η whose lower confidence bound is 0 while its score's AUC is above ½: the trials at which
    the power model answers with η at the AUC's point estimate (√2·Φ⁻¹(AUC) over μ(threshold)) — a
    projection, since the rerun measures η again. None for a design η (exact: 0 is 0) or AUC ≤ ½."""
    from app.audit.accounting.gdp import mu_for_epsilon
    from app.audit.stats.verdict import attack_efficiency

    point = []
    for t in tests:
        side = found if isinstance(found := result.get(t.name), dict) else result
        auc = side.get("auc")
        if t.efficiency_source != "measured" or not isinstance(auc, float) or auc <= 0.5 or t.biased:
            continue
        mu_hat = math.sqrt(2) * float(stats.norm.ppf(min(auc, 1 - 1e-12)))
        eta = attack_efficiency(mu_hat, mu_for_epsilon(threshold, t.delta))
        point.append((auc, eta, dataclasses.replace(t, efficiency=eta)))
    point = [p for p in point if p[1] > 0]
    if not point:
        return None
    auc, eta, _ = max(point, key=lambda p: p[1])
    step = under_powered(
        [p[2] for p in point],
        threshold,
        field=field,
        units=units,
        seconds=seconds,
        target=target,
        limit=limit,
    )
    seen = (
        f"the attack's AUC {auc:.3f} is within sampling noise of 0.5 (η's lower bound 0); at its point "
        f"estimate η = {eta:.2g}, which the rerun measures again: "
    )
    return dataclasses.replace(step, why="weak signal", text=seen + step.text)


def no_signal(request: Any, result: dict, weak: bool = False) -> list[Step]:
    """What an audit with no usable signal measured, and the request fields that change what it sees
    (`weak`: a point-estimate step comes first, so trials may help)."""
    signal = result.get("signal") or {}
    steps: list[Step] = []
    why = "no usable signal"
    if signal.get("p_with") is not None and signal.get("p_without") is not None:
        answer, p_in, p_out = signal.get("answer"), float(signal["p_with"]), float(signal["p_without"])
        if p_in < NO_REACTION and p_out < NO_REACTION:
            seen = (
                f"the model does not react to this canary (P({answer}) {p_in:.2f} with and {p_out:.2f} "
                "without): the deployment ignores its context for it"
            )
        elif abs(p_in - p_out) < 0.01:
            seen = (
                f"the canary barely changes P({answer}) ({p_in:.2f} with, {p_out:.2f} without: effect "
                f"{p_in - p_out:+.3f})"
            )
        else:
            seen = f"the canary moves P({answer}) from {p_out:.2f} to {p_in:.2f}, too little for the noise"
    else:
        sides = [result, *(result.get(n) for n in ("black_box", "white_box"))]  # a bound's, a mia's
        aucs = [b["auc"] for b in sides if isinstance(b, dict) and isinstance(b.get("auc"), float)]
        seen = f"the attack's score does not separate C1 from C0 (AUC {max(aucs):.3f})" if aucs else ""
        seen = seen or "the attack saw no usable signal"
    mechanism = getattr(request, "mechanism", None)
    teacher = getattr(mechanism, "teacher_output", "free_text")
    if getattr(mechanism, "name", None) == "private_voting" and teacher != "label_logprobs":
        steps.append(
            Step(
                why,
                {"mechanism.teacher_output": "label_logprobs"},
                f"{seen}; if the teachers answer by the label's log-probabilities, say so: "
                "mechanism.teacher_output = label_logprobs",
            )
        )
    model = getattr(request, "model", None)
    if mechanism is not None and model not in (None, "oracle"):
        steps.append(Step(why, {"model": "oracle"}, f"{seen}; test the noise itself with model = oracle"))
    if not steps and not weak:
        steps.append(Step(why, None, f"{seen}; no number of trials helps: the attack or canary must change"))
    return steps


def fallback(reason: str) -> Step:
    """The step of an inconclusive verdict no computed step covers: its reason, nothing to set."""
    return Step("inconclusive", None, reason)


def membership(
    request: Any,
    result: dict,
    tests: Sequence[MembershipTest],
    *,
    claimed: float | None,
    field: str | None,
    units: int,
    seconds: float | None,
    limit: int = MAX_TRIALS,
) -> list[dict]:
    """`next_steps` of a result judged from membership tests (mia, bound): an inconclusive verdict's
    steps (the module docstring), and the per-record step of a result with a per-record table. `field`
    and `units`: what the under-powered step scales (trials, contexts per record, a bound's trials per
    side: None) up to `limit`; `seconds`: the run's wall time where it grows with `units`, else None."""
    steps: list[Step] = []
    if result.get("verdict") == "inconclusive":
        steps = _inconclusive(
            request, result, tests, claimed=claimed, field=field, units=units, seconds=seconds, limit=limit
        )
    records = result.get("records")
    if isinstance(records, list):
        step = records_step(records, float(getattr(request, "confidence", 0.95)), seconds)
        if step is not None:
            steps.append(step)
    return [s.as_dict() for s in steps]


def _inconclusive(
    request: Any,
    result: dict,
    tests: Sequence[MembershipTest],
    *,
    claimed: float | None,
    field: str | None,
    units: int,
    seconds: float | None,
    limit: int,
) -> list[Step]:
    threshold = claimed if claimed is not None else float(getattr(request, "max_epsilon", 0.0))
    target = f"claimed ε = {fmt(claimed)}" if claimed is not None else f"max_epsilon {fmt(threshold)}"
    stop = result.get("stopped")
    if stop:
        done, needed = int(stop.get("trials") or 0), int(getattr(request, "trials", 0) or 0)
        eps = detectable_best(tests, needed / done, threshold) if done and needed and threshold > 0 else None
        step = budget_step(
            stop,
            result.get("spent"),
            done=done,
            needed=needed,
            unit="trials per context",
            eps=eps if eps is not None and math.isfinite(eps) else None,
        )
        return [step] if step is not None else [fallback(str(result.get("verdict_reason")))]
    if any(t.biased for t in tests):
        text = (
            "set threshold_strategy = split: a threshold chosen on held-out trials keeps the bound's "
            "confidence (bonferroni: on all trials, at α over its candidates)"
        )
        return [Step("in-sample threshold", {"threshold_strategy": "split"}, text)]
    if (result.get("mechanism") or {}).get("canary_included") is False:
        seed = int(getattr(request, "seed", 0) or 0) + 1
        text = (
            f"set seed = {seed}: disjoint_poisson left the canary out of every partition in this draw; "
            "another seed draws the partitions again"
        )
        return [Step("canary in no partition", {"seed": seed}, text)]
    if threshold <= 0:
        text = (
            "no finite audit certifies that nothing leaks: claim an ε (epsilon), or allow some leakage "
            "(max_epsilon > 0), and the audit can answer against it"
        )
        return [Step("nothing allowed", None, text)]
    if max((t.efficiency for t in tests), default=0.0) <= 0:
        weak = point_estimate(
            tests, result, threshold, field=field, units=units, seconds=seconds, limit=limit, target=target
        )
        return ([weak] if weak is not None else []) + no_signal(request, result, bool(weak))
    shown = result.get("epsilon_detectable")  # the verdict's own (null: unbounded)
    detectable = math.inf if shown is None else float(shown)
    if detectable > POWER_FACTOR * threshold:
        return [under_powered(tests, threshold, field=field, units=units, seconds=seconds, target=target)]
    return [fallback(str(result.get("verdict_reason")))]
