"""The verdict of an audit that measures leakage: `violation`, `leak`, `inconclusive` or `consistent`.

A lower bound alone cannot pass a system: a bound of 0 may mean "no leak" or "the audit could not see
one". So every verdict carries the audit's power, `epsilon_detectable`: the smallest true ε that this
audit — its trials, its per-test confidence, its bound, its attack's measured signal — flags with
probability ≥ ½. The rule (docs/results/soundness.md, "What a pass is worth"):

- `violation`: a claimed ε and a measured lower bound above it (the bound holds at the stated
  confidence, so a correct mechanism is flagged with probability ≤ 1 − γ);
- `leak`: nothing claimed and the bound above the request's `max_epsilon` (0: any leakage);
- `inconclusive`: the threshold was chosen in-sample (the bound is optimistic), the canary was in no
  partition, or the audit lacked power: `epsilon_detectable` > POWER_FACTOR × the threshold (the claim,
  or `max_epsilon`), which covers "no signal" (η = 0, ε_detectable = ∞) and "trials too few"
  (even a perfect outcome, all C1 trials in and no C0 trial, certifies no more than the threshold);
- `consistent`: none of these — the audit could have seen a system leaking POWER_FACTOR × its threshold
  with probability ≥ ½, and saw nothing above the threshold.

The power model (the assumption `epsilon_detectable` rests on, named in the result): the audited
system is replaced by a Gaussian mechanism of true ε' (GDP μ(ε') at the audit's δ, accounting/gdp.py),
which the attack sees with its measured efficiency η = μ̂ / μ_true ∈ [0, 2]: μ̂ = √2·Φ⁻¹(AUC) for a
score, Φ⁻¹(TPR) − Φ⁻¹(FPR) for a decision, and μ_true the mechanism's own GDP μ (its noise, or the
claim's). So the attack reaches μ_a(ε') = η·μ(ε'), at the operating point (FPR f, TPR Φ(μ_a + Φ⁻¹(f)))
whose expected counts give the largest bound; the counts are then drawn, TP ~ Bin(n_in, TPR) and
FP ~ Bin(n_out, FPR), from fixed uniforms (common random numbers across ε'), and each draw's bound is
compared with the threshold exactly as the verdict does. Without a claim η is 1 when the attack showed
some leakage (ε_lower > 0) and 0 otherwise. A verdict built from several tests (black box, white box)
flags when any does, so its power is at least each one's: the smallest `epsilon_detectable` is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import special, stats

from app.audit.accounting import MAX_EPSILON
from app.audit.accounting.gdp import epsilon_for_mu, mu_for_epsilon
from app.audit.stats.bounds import Assumption, assumption_free_epsilon, mu_from_rates, rate_bounds
from app.audit.stats.thresholds import SELECTION_PENALTY

Outcome = Literal["violation", "leak", "inconclusive", "consistent"]
OUTCOMES: tuple[str, ...] = ("violation", "leak", "inconclusive", "consistent")
FAILING: frozenset[str] = frozenset({"violation", "leak"})

POWER_FACTOR = 2.0
"""`consistent` needs ε_detectable ≤ POWER_FACTOR × the threshold (a system leaking twice its claim is
seen with probability ≥ ½)."""
DETECT_PROBABILITY = 0.5
DRAWS = 2000
"""Monte Carlo draws of (TP, FP) per candidate ε' (standard error of a rate ≤ 1.1 points)."""
_FPR_GRID = 48


@dataclass(frozen=True)
class MembershipTest:
    """One membership test behind a verdict, as the power model sees it.

    `n_in`/`n_out` are the trials its bound was computed from (None: the exact estimator's population
    rates); `confidence` the joint confidence of its pair of one-sided bounds; `efficiency` η ∈ [0, 1].
    """

    name: str
    n_in: int | None
    n_out: int | None
    confidence: float
    delta: float
    assumption: Assumption
    efficiency: float
    epsilon_lower: float
    biased: bool = False
    selection_penalty: float = 1.0  # the α divisor its threshold was chosen at (Split: SELECTION_PENALTY)


@dataclass(frozen=True)
class Judgement:
    """An audit's verdict with its one-line reason and headline."""

    verdict: Outcome
    reason: str
    headline: str
    epsilon_lower: float | None
    epsilon_detectable: float | None  # inf: no true ε ≤ MAX_EPSILON is flagged; None: not needed
    threshold: float

    def as_dict(self) -> dict:
        detectable = self.epsilon_detectable
        unbounded = None if detectable is None else not math.isfinite(detectable)
        return {
            "verdict": self.verdict,
            "verdict_reason": self.reason,
            "headline": self.headline,
            "epsilon_detectable": detectable if unbounded is False else None,
            "epsilon_detectable_unbounded": unbounded,
        }


MAX_EFFICIENCY = 2.0
"""η is an estimate: capping it at 1 would bias a correct mechanism's power down (E[min(1, η̂)] < 1);
above 2 the attack sees more than twice the claimed signal, and the verdict is a violation anyway."""


def measured_mu(bound: dict, n_in: int | None, n_out: int | None) -> float:
    """μ̂, the GDP μ the attack shows: √2·Φ⁻¹(AUC) for a score (a μ-shift of Gaussians has AUC Φ(μ/√2);
    it uses every trial, not one threshold's counts), else Φ⁻¹(TPR) − Φ⁻¹(FPR) of the decision with rates
    (k + ½)/(n + 1)."""
    auc = bound.get("auc")
    binary = bound.get("threshold_strategy") in ("decision", "counts")
    if auc is not None and not binary:
        return float(math.sqrt(2) * special.ndtri(min(max(auc, 1e-12), 1 - 1e-12)))
    tpr, fpr = float(bound["tpr"]), float(bound["fpr"])
    if n_in is not None and n_out is not None:
        tpr = (tpr * n_in + 0.5) / (n_in + 1)
        fpr = (fpr * n_out + 0.5) / (n_out + 1)
    tpr, fpr = min(max(tpr, 1e-12), 1 - 1e-12), min(max(fpr, 1e-12), 1 - 1e-12)
    return float(special.ndtri(tpr) - special.ndtri(fpr))


def attack_efficiency(mu_hat: float, mu_true: float) -> float:
    """η = μ̂ / μ_true clipped to [0, MAX_EFFICIENCY]."""
    if mu_true <= 0 or not math.isfinite(mu_true):
        return 1.0 if math.isinf(mu_true) else 0.0
    return min(MAX_EFFICIENCY, max(0.0, mu_hat / mu_true))


def _bound_scale(test: MembershipTest, tp: np.ndarray, fp: np.ndarray, alpha: float) -> np.ndarray:
    """The bound from counts (TP, FP) at level α — from the rates themselves when n is None (population
    rates, no sampling margin) — on its own scale: μ_lower under gdp, ε_af under none."""
    if test.n_in is None or test.n_out is None:
        fnr_ub, fpr_ub = 1.0 - tp, fp
    else:
        fnr_ub, fpr_ub = rate_bounds(tp, test.n_in, fp, test.n_out, alpha)
    if test.assumption == "gdp":
        return mu_from_rates(fnr_ub, fpr_ub)
    return assumption_free_epsilon(fnr_ub, fpr_ub, test.delta)


def _flags(test: MembershipTest, tp: np.ndarray, fp: np.ndarray, threshold: float) -> np.ndarray:
    """Whether the bound from counts (TP, FP) — or from exact rates when n is None — exceeds `threshold`."""
    bound = _bound_scale(test, tp, fp, (1 - test.confidence) / 2)
    return bound > (mu_for_epsilon(threshold, test.delta) if test.assumption == "gdp" else threshold)


def _operating_points(test: MembershipTest, mu: float) -> tuple[np.ndarray, np.ndarray]:
    """FPR grid (log-spaced down to half a C0 trial) and the TPR a μ-GDP test reaches at each."""
    smallest = 0.5 / test.n_out if test.n_out else 1e-9
    fpr = np.geomspace(max(smallest, 1e-12), 0.5, _FPR_GRID)
    return fpr, special.ndtr(mu + special.ndtri(fpr))


def _best_point(test: MembershipTest, mu: float) -> tuple[float, float]:
    """The operating point the audit's threshold search would pick: the largest bound of the expected
    counts, at the α its strategy chooses with (Split penalises the selection 100×, thresholds.py)."""
    fpr, tpr = _operating_points(test, mu)
    exact = test.n_in is None or test.n_out is None
    expected = (tpr, fpr) if exact else (tpr * test.n_in, fpr * test.n_out)  # type: ignore[operator]
    score = _bound_scale(test, *expected, (1 - test.confidence) / 2 / test.selection_penalty)
    i = int(np.argmax(score))
    return float(tpr[i]), float(fpr[i])


def detection_rate(
    test: MembershipTest, epsilon_true: float, threshold: float, uniforms: np.ndarray
) -> float:
    """P[this audit's test flags a Gaussian mechanism of true ε'] under the power model (module docstring).

    `uniforms` is a (2, DRAWS) array of U(0, 1) draws, reused across ε' (common random numbers)."""
    mu = test.efficiency * mu_for_epsilon(epsilon_true, test.delta)
    if mu <= 0:
        return 0.0
    tpr, fpr = _best_point(test, mu)
    if test.n_in is None or test.n_out is None:
        return float(_flags(test, np.array([tpr]), np.array([fpr]), threshold)[0])
    tp = stats.binom.ppf(uniforms[0], test.n_in, tpr)
    fp = stats.binom.ppf(uniforms[1], test.n_out, fpr)
    return float(np.mean(_flags(test, tp, fp, threshold)))


def certifiable_max(test: MembershipTest) -> float:
    """The largest bound these trials can give: every C1 trial called in, no C0 trial (∞ for exact)."""
    if test.n_in is None or test.n_out is None:
        return math.inf
    best = float(_bound_scale(test, np.array([test.n_in]), np.array([0]), (1 - test.confidence) / 2)[0])
    return epsilon_for_mu(best, test.delta) if test.assumption == "gdp" else best


def epsilon_detectable(test: MembershipTest, threshold: float, uniforms: np.ndarray) -> float:
    """The smallest true ε' ≤ MAX_EPSILON with `detection_rate` ≥ ½ (bisection to 0.5 %); ∞ if none."""
    if test.efficiency <= 0 or certifiable_max(test) <= threshold:
        return math.inf

    def seen(eps: float) -> bool:
        return detection_rate(test, eps, threshold, uniforms) >= DETECT_PROBABILITY

    if not seen(MAX_EPSILON):
        return math.inf
    lo, hi = max(threshold, 1e-3), MAX_EPSILON
    if seen(lo):
        return lo
    while hi - lo > 0.005 * hi:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if seen(mid) else (mid, hi)
    return hi


def power_uniforms(rng: np.random.Generator) -> np.ndarray:
    """The (2, DRAWS) uniforms the power model draws its counts from (one stream of the audit's seeds)."""
    return rng.random((2, DRAWS))


def fmt(x: float | None) -> str:
    """A number for a headline: three significant digits, ∞ for unbounded."""
    if x is None or not math.isfinite(x):
        return "∞"
    return f"{x:.3g}"


def judge(
    tests: list[MembershipTest],
    *,
    claimed: float | None,
    max_epsilon: float,
    confidence: float,
    uniforms: np.ndarray,
    subject: str = "The system",
    auc: float | None = None,
    blocked: str | None = None,
) -> Judgement:
    """The verdict of one audit from its tests (the module docstring's rule).

    `claimed` is the system's claimed ε (None: nothing claimed, so the threshold is `max_epsilon`);
    `blocked` a reason the audit could not see the canary at all (e.g. no partition held it)."""
    threshold = claimed if claimed is not None else max_epsilon
    unbiased = [t for t in tests if not t.biased]
    lowers = [t.epsilon_lower for t in (unbiased or tests)]
    lower = max(lowers) if lowers else None
    conf = f"{confidence:.0%}".replace("%", " %")
    against = f"against a claimed {fmt(claimed)}" if claimed is not None else "nothing is claimed"

    def make(verdict: Outcome, reason: str, headline: str, detectable: float | None) -> Judgement:
        return Judgement(verdict, reason, headline, lower, detectable, threshold)

    if any(t.biased for t in tests):
        reason = (
            "the threshold was chosen in-sample, on the trials its bound is computed from, so the bound is "
            "optimistic; use threshold_strategy split or bonferroni"
        )
        return make("inconclusive", reason, f"Inconclusive: {reason}", math.inf)
    if blocked:
        return make("inconclusive", blocked, f"Inconclusive: {blocked}", math.inf)
    if lower is not None and lower > threshold:
        shown = f"ε ≥ {fmt(lower)} ({conf})"
        if claimed is not None:
            reason = f"the measured lower bound {fmt(lower)} exceeds the claimed ε = {fmt(claimed)}"
            return make("violation", reason, f"Measured {shown} {against}: violation", None)
        limit = f"above the allowed {fmt(max_epsilon)}" if max_epsilon > 0 else "nothing is claimed"
        auc_text = f", AUC {auc:.2f}" if auc is not None else ""
        reason = f"the measured lower bound {fmt(lower)} exceeds max_epsilon = {fmt(max_epsilon)}"
        return make("leak", reason, f"{subject} leaks: {shown}{auc_text}; {limit}", None)

    detectable = min((epsilon_detectable(t, threshold, uniforms) for t in tests), default=math.inf)
    if math.isfinite(detectable):
        could = f"this audit could only have detected ε ≥ {fmt(detectable)}"
    else:
        could = f"this audit could not have detected any ε up to {fmt(MAX_EPSILON)}"
    target = f"claimed {fmt(claimed)}" if claimed is not None else f"max_epsilon {fmt(max_epsilon)}"
    trials = max((t.n_in or 0 for t in tests), default=0)
    per_side = f"with {trials} trials per side, " if trials else ""
    if detectable <= POWER_FACTOR * threshold and threshold > 0:
        reason = (
            f"no bound above {fmt(threshold)}; the audit would have flagged ε ≥ {fmt(detectable)} with "
            "probability ≥ ½"
        )
        measured = f"measured ε ≥ {fmt(lower)} ({conf})"
        if claimed is not None:
            head = f"Consistent with the claimed ε = {fmt(claimed)}: {measured}; would have detected ε ≥ {fmt(detectable)}"
        else:
            head = f"Within max_epsilon {fmt(max_epsilon)}: {measured}; would have detected ε ≥ {fmt(detectable)}"
        return make("consistent", reason, head, detectable)
    resolvable = [t for t in tests if certifiable_max(t) > threshold]
    if tests and all(certifiable_max(t) <= threshold for t in tests):
        best = max(certifiable_max(t) for t in tests)
        why = f"{trials} trials per side can certify at most ε = {fmt(best)}"
    elif resolvable and not math.isfinite(detectable):
        why = "the attack saw no usable signal" + (f" (AUC {auc:.3f})" if auc is not None else "")
    elif threshold <= 0:
        why = "no leakage was shown, and no finite audit can certify that there is none"
    else:
        why = f"{per_side}the audit lacked the power to see ε = {fmt(POWER_FACTOR * threshold)}"
    reason = f"{why}; {could} ({target})"
    return make("inconclusive", reason, f"Inconclusive: {reason}", detectable)


def membership_test(
    name: str,
    bound: dict,
    *,
    delta: float,
    confidence: float,
    claimed: float | None,
    mu_true: float | None = None,
) -> MembershipTest:
    """A `MembershipTest` from a bound's result fields (tpr, fpr, counts, epsilon_lower, mu_lower, assumption, …).

    η against `mu_true` (default: the GDP μ of the claim) under a claim; without one, 1 when the bound
    shows any leakage and 0 otherwise. A bound without counts holds population rates (the exact estimator)."""
    counts = bound.get("counts")
    n_in = counts["tp"] + counts["fn"] if counts else None
    n_out = counts["fp"] + counts["tn"] if counts else None
    lower = bound.get("epsilon_lower")
    if lower is None:
        lower = math.inf if bound.get("epsilon_lower_unbounded") else 0.0
    if claimed is None:
        efficiency = 1.0 if lower > 0 else 0.0
    else:
        mu = mu_true if mu_true else mu_for_epsilon(claimed, delta)
        if n_in is None or bound.get("tpr") is None or bound.get("fpr") is None:
            efficiency = attack_efficiency(float(bound.get("mu_lower") or 0.0), mu)  # exact: population μ
        else:
            efficiency = attack_efficiency(measured_mu(bound, n_in, n_out), mu)
    return MembershipTest(
        name=name,
        n_in=n_in,
        n_out=n_out,
        confidence=float(bound.get("confidence") or confidence),
        delta=delta,
        assumption=bound.get("assumption") or "none",
        efficiency=efficiency,
        epsilon_lower=float(lower),
        biased=bound.get("threshold_strategy") == "in_sample",
        selection_penalty=SELECTION_PENALTY if bound.get("threshold_strategy") == "split" else 1.0,
    )


def judge_accounting(measured: float, claimed: float) -> Judgement:
    """The verdict of an accounting audit (synthetic_generation, 001 §5): the privacy spent on these very
    examples, computed from the model's own distributions rather than estimated from trials, so it has no
    sampling error and no power to lack — any overspend is seen. `violation` above the claim (float slack
    1e-9), `consistent` otherwise."""
    if measured > claimed * (1 + 1e-9):
        reason = f"the data-dependent ε {fmt(measured)} exceeds the budget ε = {fmt(claimed)}"
        return Judgement(
            "violation",
            reason,
            f"Spent ε = {fmt(measured)} against a budget of {fmt(claimed)}: violation",
            measured,
            None,
            claimed,
        )
    reason = f"the data-dependent ε {fmt(measured)} is within the budget (an exact measurement, no sampling)"
    head = f"Consistent with the budget ε = {fmt(claimed)}: these examples spent ε = {fmt(measured)}"
    return Judgement("consistent", reason, head, measured, claimed, claimed)
