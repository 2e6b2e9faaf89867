"""The verdict of an audit that measures leakage: `violation`, `leak`, `inconclusive` or `consistent`.

A lower bound alone cannot pass a system: a bound of 0 may mean "no leak" or "the audit could not see
one". So every verdict carries the audit's power (`power`, `epsilon_detectable`): the smallest true ε that
this audit — its trials, its per-test confidence, its threshold strategy, its bound and its attack's
efficiency — flags with probability ≥ DETECT_PROBABILITY. The rule (docs/results/soundness.md, "What a pass
is worth"):

- `violation`: a claimed ε and a measured lower bound above it (the bound holds at the stated
  confidence, so a correct mechanism is flagged with probability ≤ 1 − γ);
- `leak`: nothing claimed and the bound above the request's `max_epsilon` (0: any leakage);
- `inconclusive`: the threshold was chosen in-sample (the bound is optimistic), the canary was in no
  partition, or the audit lacked power: `epsilon_detectable` > POWER_FACTOR × the threshold (the claim,
  or `max_epsilon`), which covers "no signal" (η = 0, ε_detectable = ∞) and "trials too few";
- `consistent`: none of these — the audit would have flagged a system leaking POWER_FACTOR × its
  threshold with probability ≥ DETECT_PROBABILITY, and saw nothing above the threshold.

The power model (named in the result's `power.assumption`): the audited system is replaced by a Gaussian
mechanism of true ε' (GDP μ(ε') at the audit's δ, accounting/gdp.py), which the attack sees with
efficiency η ∈ [0, 1], so it reaches μ_a(ε') = η·μ(ε') at the operating point (FPR f, TPR Φ(μ_a + Φ⁻¹(f)))
whose expected counts give the largest bound at the α the threshold strategy chooses with; with
TP ~ Bin(n_in, TPR) and FP ~ Bin(n_out, FPR), the probability that the bound — computed exactly as the
verdict does (Bonferroni at α/m) — exceeds the threshold is summed exactly: the bound rises with TP, so
P[flag] = Σ_fp P[FP = fp]·P[TP ≥ t*(fp)] with t*(fp) the fewest true positives flagged at fp.

η must not be something the system under test can raise: a system leaking k × its claim shows k times the
signal, and an efficiency read off it as μ̂ / μ(claim) would credit the attack with power it does not have
(a leakier system would look *more* auditable). So η (`power.efficiency_source`) is either
- `design`: the attack's exact population μ against the mechanism *as designed* at the threshold (its
  calibrated noise, not the noise the system under test really adds), over μ(threshold), capped at 1; or
- `measured`: a one-sided lower confidence bound (EFFICIENCY_CONFIDENCE) on the attack's μ̂ over
  μ(threshold), capped at 1 —
  √2·Φ⁻¹(AUC_lower) for a score (Hanley-McNeil variance), the Clopper-Pearson μ_lower for a decision.
The cap keeps a leaking system from lending the attack more than a perfect attack's power.

Rare one-sided leaks (the canary's answer given only when it is present) have no Gaussian shape; the
result also names `leak_rate_detectable`: the smallest per-trial probability of such a leak (FPR 0) that
this audit flags with probability ≥ DETECT_PROBABILITY.
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
from app.audit.stats.outcomes import FAILING, OUTCOMES, Outcome  # noqa: F401 - named here too
from app.audit.stats.thresholds import SELECTION_PENALTY, bonferroni_tests

EfficiencySource = Literal["design", "measured"]

POWER_FACTOR = 1.5
"""`consistent` needs ε_detectable ≤ POWER_FACTOR × the threshold."""
DETECT_PROBABILITY = 0.8
"""ε_detectable is the smallest true ε flagged with at least this probability."""
POWER_POINTS = (1.25, 1.5, 2.0)
"""Multiples of the threshold at which `power.detection` reports the probability of a flag."""
MIN_CONFIDENCE = 0.5
"""Below it a bound's error rate exceeds DETECT_PROBABILITY's complement and the power rule means nothing."""
EFFICIENCY_CONFIDENCE = 0.8
"""The one-sided level of the lower confidence bound on the attack's μ̂ behind a `measured` η: the cap at 1
is what keeps a leaking system from raising η; this level keeps sampling noise from raising it in 4 audits
of 5, without demanding twice the trials that the 95 % level would."""
MAX_EFFICIENCY = 1.0
"""η ≤ 1: no attack sees more than the mechanism's whole signal; more is the system's own leak."""
POWER_ASSUMPTION = (
    "Gaussian-shaped ROC: the system is a Gaussian mechanism of true ε' seen by the attack with efficiency "
    "η (constant in ε'); one-sided leaks (FPR 0) are covered by leak_rate_detectable instead"
)
_TAIL = 1e-9
"""FP counts beyond these binomial tails are left out of the sum (their mass is below 2e-9)."""
_FPR_GRID = 48


@dataclass(frozen=True)
class MembershipTest:
    """One membership test behind a verdict, as the power model sees it.

    `n_in`/`n_out` are the trials its bound was computed from (None: the exact estimator's population
    rates); `confidence` the joint confidence of its pair of one-sided bounds; `efficiency` η ∈ [0, 1];
    `tests` the Bonferroni candidates its bound was corrected over (each at α / tests);
    `selection_penalty` the α divisor its threshold was chosen at (Split: SELECTION_PENALTY)."""

    name: str
    n_in: int | None
    n_out: int | None
    confidence: float
    delta: float
    assumption: Assumption
    efficiency: float
    epsilon_lower: float
    biased: bool = False
    selection_penalty: float = 1.0
    tests: int = 1
    efficiency_source: EfficiencySource = "measured"
    gaussian_shaped: bool = True  # False: more C1 trials above every C0 trial than a Gaussian ROC allows

    @property
    def alpha(self) -> float:
        """Each one-sided bound's level: (1 − γ)/2, divided among the Bonferroni candidates."""
        return (1 - self.confidence) / 2 / self.tests


@dataclass(frozen=True)
class Judgement:
    """An audit's verdict with its one-line reason, headline and power."""

    verdict: Outcome
    reason: str
    headline: str
    epsilon_lower: float | None
    epsilon_detectable: float | None  # inf: no true ε ≤ MAX_EPSILON is flagged; None: not needed
    threshold: float
    power: dict | None = None

    def as_dict(self) -> dict:
        detectable = self.epsilon_detectable
        unbounded = None if detectable is None else not math.isfinite(detectable)
        return {
            "verdict": self.verdict,
            "verdict_reason": self.reason,
            "headline": self.headline,
            "epsilon_detectable": detectable if unbounded is False else None,
            "epsilon_detectable_unbounded": unbounded,
            "power": self.power,
        }


def _probit(p: float) -> float:
    return float(special.ndtri(min(max(p, 1e-12), 1 - 1e-12)))


def auc_lower(auc: float, n_in: int, n_out: int, alpha: float) -> float:
    """One-sided (1 − α) lower confidence bound on an AUC from n_in and n_out scores: AUC − z·SE with
    Hanley and McNeil's (1982) variance, Var = [A(1−A) + (n₁−1)(Q₁−A²) + (n₂−1)(Q₂−A²)] / (n₁n₂),
    Q₁ = A/(2−A), Q₂ = 2A²/(1+A)."""
    a = min(max(auc, 0.0), 1.0)
    q1, q2 = a / (2 - a), 2 * a * a / (1 + a)
    var = (a * (1 - a) + (n_in - 1) * (q1 - a * a) + (n_out - 1) * (q2 - a * a)) / (n_in * n_out)
    return a - float(special.ndtri(1 - alpha)) * math.sqrt(max(var, 0.0))


def measured_mu_lower(bound: dict, n_in: int | None, n_out: int | None, alpha: float) -> float:
    """A one-sided lower confidence bound on the attack's μ: √2·Φ⁻¹(AUC_lower) for a score (a μ-shift of
    Gaussians has AUC Φ(μ/√2) and the AUC uses every trial: `scored` holds how many, else the counts'),
    else the Clopper-Pearson μ_lower of the decision's counts; the exact estimator's population μ as it is."""
    auc = bound.get("auc")
    binary = bound.get("threshold_strategy") in ("decision", "counts")
    if n_in is None or n_out is None:
        return float(bound.get("mu_lower") or 0.0)
    if auc is not None and not binary:
        area = auc_lower(float(auc), *_scored(bound, n_in, n_out), alpha)
        return max(0.0, math.sqrt(2) * _probit(area))
    tp, fp = round(float(bound["tpr"]) * n_in), round(float(bound["fpr"]) * n_out)
    fnr_ub, fpr_ub = rate_bounds(np.array([tp]), n_in, np.array([fp]), n_out, alpha)
    return float(mu_from_rates(fnr_ub, fpr_ub)[0])


SHAPE_LEVEL = 1e-3
"""The false-alarm rate of the shape check (`gaussian_shaped`) on an audit whose ROC is Gaussian."""


def gaussian_shaped(bound: dict, n_in: int, n_out: int) -> bool:
    """Whether the scores' top is what a Gaussian-shaped ROC allows: k₀ C1 scores above every C0 score.
    Under a μ-shift (μ at the AUC's upper confidence bound, level SHAPE_LEVEL) the largest C0 score sits
    at FPR U ~ Beta(1, n_out), and k₀ | U ~ Bin(n_in, Φ(μ + Φ⁻¹(U))); a p-value P[k ≥ k₀] below
    SHAPE_LEVEL (integrated over U at 256 quantiles) is mass at FPR 0 — a one-sided leak the Gaussian
    power model does not describe."""
    above, auc = bound.get("above_every_out"), bound.get("auc")
    if above is None or auc is None or int(above) == 0:
        return True
    area = 1 - auc_lower(1 - float(auc), n_out, n_in, SHAPE_LEVEL)  # the upper bound, by symmetry
    mu_up = math.sqrt(2) * _probit(area)
    u = stats.beta.ppf((np.arange(256) + 0.5) / 256, 1, n_out)
    p_value = float(np.mean(stats.binom.sf(int(above) - 1, n_in, special.ndtr(mu_up + special.ndtri(u)))))
    return p_value >= SHAPE_LEVEL


def attack_efficiency(mu_attack: float, mu_threshold: float) -> float:
    """η = μ_attack / μ(threshold) clipped to [0, MAX_EFFICIENCY]; a threshold with μ = ∞ gives 1 when the attack
    shows any signal, 0 otherwise."""
    if mu_threshold <= 0 or not math.isfinite(mu_threshold):
        return 1.0 if math.isinf(mu_threshold) and mu_attack > 0 else 0.0
    return min(MAX_EFFICIENCY, max(0.0, mu_attack / mu_threshold))


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
    bound = _bound_scale(test, tp, fp, test.alpha)
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
    expected = (tpr, fpr) if exact else (tpr * test.n_in, fpr * test.n_out)
    score = _bound_scale(test, *expected, test.alpha / test.selection_penalty)
    i = int(np.argmax(score))
    return float(tpr[i]), float(fpr[i])


def fewest_flagged(test: MembershipTest, fp: np.ndarray, threshold: float) -> np.ndarray:
    """t*(fp): the fewest true positives whose bound at each FP count exceeds the threshold (n_in + 1 where
    none does). Both bounds exceed the threshold exactly when the FNR's upper bound is below a critical
    c(FPR_ub): gdp, −Φ⁻¹(FNR) − Φ⁻¹(FPR) > μ(threshold) ⟺ FNR < Φ(−μ − Φ⁻¹(FPR)); none (Kairouz et al.
    2015), FNR < max(1 − δ − e^ε·FPR, (1 − FPR − δ)·e^−ε). And the Clopper-Pearson upper on the FNR from
    fn = n − tp is below c ⟺ I_c(fn + 1, n − fn) > 1 − α, which rises with TP: a vectorized bisection on
    the regularized incomplete beta (no inversion per step)."""
    assert test.n_in is not None and test.n_out is not None
    _, fpr_ub = rate_bounds(np.zeros(fp.shape), 1, fp.astype(np.float64), test.n_out, test.alpha)
    if test.assumption == "gdp":
        critical = special.ndtr(-mu_for_epsilon(threshold, test.delta) - special.ndtri(fpr_ub))
    else:
        e = math.exp(threshold)
        critical = np.maximum(1 - test.delta - e * fpr_ub, (1 - fpr_ub - test.delta) / e)
    n = test.n_in
    lo = np.ones(fp.shape, dtype=np.int64)  # TP = 0 bounds the FNR by 1: never flagged; t* ∈ [lo, hi]
    hi = np.full(fp.shape, n + 1, dtype=np.int64)
    while np.any(lo < hi):
        mid = (lo + hi) // 2
        fn = n - np.minimum(mid, n)
        flagged = (special.betainc(fn + 1, n - fn, np.clip(critical, 0, 1)) > 1 - test.alpha) & (mid <= n)
        flagged &= critical > 0
        hi, lo = np.where(flagged, mid, hi), np.where(flagged, lo, mid + 1)
    return lo


def detection_rate(test: MembershipTest, epsilon_true: float, threshold: float) -> float:
    """P[this audit's test flags a Gaussian mechanism of true ε'] under the power model (module docstring):
    Σ_fp Bin(fp; n_out, FPR)·P[Bin(n_in, TPR) ≥ t*(fp)], exactly."""
    mu = test.efficiency * mu_for_epsilon(epsilon_true, test.delta)
    if mu <= 0:
        return 0.0
    tpr, fpr = _best_point(test, mu)
    if test.n_in is None or test.n_out is None:
        return float(_flags(test, np.array([tpr]), np.array([fpr]), threshold)[0])
    low, high = stats.binom.ppf(_TAIL, test.n_out, fpr), stats.binom.isf(_TAIL, test.n_out, fpr)
    fp = np.arange(int(max(low - 1, 0)), int(min(high + 1, test.n_out)) + 1)
    tp_needed = fewest_flagged(test, fp, threshold)
    chance = stats.binom.pmf(fp, test.n_out, fpr) * stats.binom.sf(tp_needed - 1, test.n_in, tpr)
    return float(min(1.0, chance.sum()))


def certifiable_max(test: MembershipTest) -> float:
    """The largest bound these trials can give: every C1 trial called in, no C0 trial (∞ for exact)."""
    if test.n_in is None or test.n_out is None:
        return math.inf
    best = float(_bound_scale(test, np.array([test.n_in]), np.array([0]), test.alpha)[0])
    return epsilon_for_mu(best, test.delta) if test.assumption == "gdp" else best


def epsilon_detectable(test: MembershipTest, threshold: float) -> float:
    """The smallest true ε' in (threshold, MAX_EPSILON] with `detection_rate` ≥ DETECT_PROBABILITY, by
    bisection to 0.5 %; ∞ if none. Always above the threshold: a test valid at confidence ≥ ½ flags a
    system exactly at it with probability ≤ ½ < DETECT_PROBABILITY."""
    if test.efficiency <= 0 or certifiable_max(test) <= threshold:
        return math.inf

    def seen(eps: float) -> bool:
        return detection_rate(test, eps, threshold) >= DETECT_PROBABILITY

    if not seen(MAX_EPSILON):
        return math.inf
    lo, hi = max(threshold, 1e-3), MAX_EPSILON
    if seen(2 * lo):
        hi = 2 * lo
    while hi - lo > 0.005 * hi:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if seen(mid) else (mid, hi)
    return hi


def leak_rate_detectable(test: MembershipTest, threshold: float) -> float | None:
    """The smallest per-trial rate p of a one-sided leak (TP ~ Bin(n_in, p), FP = 0) that this test flags
    with probability ≥ DETECT_PROBABILITY: with t* the fewest true positives whose bound at FP = 0
    exceeds the threshold, P[Bin(n, p) ≥ t*] = I_p(t*, n − t* + 1) ≥ DETECT_PROBABILITY gives
    p = Beta⁻¹(DETECT_PROBABILITY; t*, n − t* + 1). None for population rates (any p > δ shows), and
    when even n_in of n_in would not exceed the threshold (1.0 is then not enough either)."""
    if test.n_in is None or test.n_out is None:
        return None
    t = int(fewest_flagged(test, np.zeros(1, dtype=np.int64), threshold)[0])
    if t > test.n_in:
        return None
    if t == 0:
        return 0.0
    return float(special.betaincinv(t, test.n_in - t + 1, DETECT_PROBABILITY))


def fmt(x: float | None) -> str:
    """A number for a headline: three significant digits, ∞ for unbounded."""
    if x is None or not math.isfinite(x):
        return "∞"
    return f"{x:.3g}"


def _percent(p: float) -> str:
    return f"{100 * p:.2g} %"


def power_of(tests: list[MembershipTest], threshold: float) -> dict:
    """The result's `power`: the rule's constants, the model's assumption, the efficiency the model used
    (the most powerful test's, and its source), the probability of a flag at POWER_POINTS × the
    threshold (the best single test's: a verdict flags when any test does, so this is a lower bound),
    ε_detectable and leak_rate_detectable."""
    detectable = {t.name: epsilon_detectable(t, threshold) for t in tests}
    best = min(tests, key=lambda t: detectable[t.name]) if tests else None
    rates = [r for t in tests if (r := leak_rate_detectable(t, threshold)) is not None]
    at = {
        f"{k:g}": max((detection_rate(t, k * threshold, threshold) for t in tests), default=0.0)
        for k in POWER_POINTS
    }
    eps = detectable[best.name] if best else math.inf
    return {
        "detect_probability": DETECT_PROBABILITY,
        "factor": POWER_FACTOR,
        "threshold": threshold,
        "assumption": POWER_ASSUMPTION,
        "efficiency": best.efficiency if best else 0.0,
        "efficiency_source": best.efficiency_source if best else None,
        "tests": {
            t.name: {
                "efficiency": t.efficiency,
                "efficiency_source": t.efficiency_source,
                "epsilon_detectable": detectable[t.name] if math.isfinite(detectable[t.name]) else None,
            }
            for t in tests
        },
        "detection": at if threshold > 0 else None,
        "epsilon_detectable": eps if math.isfinite(eps) else None,
        "leak_rate_detectable": min(rates) if rates else None,
    }


def judge(
    tests: list[MembershipTest],
    *,
    claimed: float | None,
    max_epsilon: float,
    confidence: float,
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

    def make(
        verdict: Outcome, reason: str, headline: str, detectable: float | None, power: dict | None = None
    ) -> Judgement:
        return Judgement(verdict, reason, headline, lower, detectable, threshold, power)

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

    power = power_of(tests, threshold)
    detectable = power["epsilon_detectable"] if power["epsilon_detectable"] is not None else math.inf
    rate = power["leak_rate_detectable"]
    p = f"P ≥ {DETECT_PROBABILITY:g}"
    if math.isfinite(detectable):
        could = f"this audit could only have detected ε ≥ {fmt(detectable)} ({p})"
    else:
        could = f"this audit could not have detected any ε up to {fmt(MAX_EPSILON)} ({p})"
    target = f"claimed {fmt(claimed)}" if claimed is not None else f"max_epsilon {fmt(max_epsilon)}"
    trials = max((t.n_in or 0 for t in tests), default=0)
    per_side = f"with {trials} trials per side, " if trials else ""
    if detectable <= POWER_FACTOR * threshold and threshold > 0 and not all(t.gaussian_shaped for t in tests):
        reason = (
            "more trials with the canary score above every trial without it than a Gaussian-shaped ROC allows "
            "(a one-sided leak): the power model does not describe this system, so its power is unknown"
        )
        return make("inconclusive", reason, f"Inconclusive: {reason}", detectable, power)
    if detectable <= POWER_FACTOR * threshold and threshold > 0:
        leak = f" or a leak in ≥ {_percent(rate)} of answers" if rate is not None else ""
        seen = f"would have detected ε ≥ {fmt(detectable)} (Gaussian-shaped, {p}){leak}"
        reason = f"no bound above {fmt(threshold)}; the audit {seen}"
        measured = f"measured ε ≥ {fmt(lower)} ({conf})"
        if claimed is not None:
            head = f"Consistent with the claimed ε = {fmt(claimed)}: {measured}; {seen}"
        else:
            head = f"Within max_epsilon {fmt(max_epsilon)}: {measured}; {seen}"
        return make("consistent", reason, head, detectable, power)
    if tests and all(certifiable_max(t) <= threshold for t in tests):
        best = max(certifiable_max(t) for t in tests)
        why = f"{trials} trials per side can certify at most ε = {fmt(best)}"
    elif not math.isfinite(detectable):
        why = "the attack saw no usable signal" + (f" (AUC {auc:.3f})" if auc is not None else "")
    elif threshold <= 0:
        why = "no leakage was shown, and no finite audit can certify that there is none"
    else:
        why = f"{per_side}the audit lacked the power to see ε = {fmt(POWER_FACTOR * threshold)} ({p})"
    reason = f"{why}; {could} ({target})"
    return make("inconclusive", reason, f"Inconclusive: {reason}", detectable, power)


def membership_test(
    name: str,
    bound: dict,
    *,
    delta: float,
    confidence: float,
    threshold: float,
) -> MembershipTest:
    """A `MembershipTest` from a bound's result fields (tpr, fpr, counts, auc, epsilon_lower, mu_lower,
    assumption, threshold_strategy, and `mu_design` where the audit knows its mechanism's design).

    η against μ(threshold) (module docstring): from `mu_design` when present, else from a lower
    confidence bound on the attack's μ̂ at the test's own one-sided level. A threshold of 0 (nothing
    claimed, no leakage allowed) has no μ to compare with: η is 1 when the bound shows any leakage."""
    counts = bound.get("counts")
    n_in = counts["tp"] + counts["fn"] if counts else None
    n_out = counts["fp"] + counts["tn"] if counts else None
    lower = bound.get("epsilon_lower")
    if lower is None:
        lower = math.inf if bound.get("epsilon_lower_unbounded") else 0.0
    test_confidence = float(bound.get("confidence") or confidence)
    strategy = bound.get("threshold_strategy")
    tests = bonferroni_tests(n_out) if strategy == "bonferroni" and n_out else 1
    source: EfficiencySource = "design" if bound.get("mu_design") is not None else "measured"
    if threshold <= 0:
        efficiency = 1.0 if lower > 0 else 0.0
    else:
        mu_threshold = mu_for_epsilon(threshold, delta)
        if source == "design":
            mu_attack = float(bound["mu_design"])
        elif n_in is not None and bound.get("tpr") is None and bound.get("auc") is None:
            mu_attack = 0.0
        else:
            mu_attack = measured_mu_lower(bound, n_in, n_out, 1 - EFFICIENCY_CONFIDENCE)
        efficiency = attack_efficiency(mu_attack, mu_threshold)
    return MembershipTest(
        name=name,
        n_in=n_in,
        n_out=n_out,
        confidence=test_confidence,
        delta=delta,
        assumption=bound.get("assumption") or "none",
        efficiency=efficiency,
        epsilon_lower=float(lower),
        biased=strategy == "in_sample",
        selection_penalty=SELECTION_PENALTY if strategy == "split" else 1.0,
        tests=tests,
        efficiency_source=source,
        gaussian_shaped=True if n_in is None else gaussian_shaped(bound, *_scored(bound, n_in, n_out)),
    )


def _scored(bound: dict, n_in: int, n_out: int | None) -> tuple[int, int]:
    """How many scores the AUC and the shape check saw: `scored` where the bound records it, else the counts'."""
    scored = bound.get("scored") or {"in": n_in, "out": n_out}
    return int(scored["in"]), int(scored["out"])


def judge_accounting(
    measured: float, claimed: float, *, accounted: float | None = None, overspent: bool = False
) -> Judgement:
    """The verdict of an accounting audit (synthetic_generation, 001 §5): the privacy spent on these very
    examples, computed from the model's own distributions rather than estimated from trials, so it has no
    sampling error. It checks the claim, not only this batch: a batch is always within the worst case of
    its remove-one neighbours, so a mis-calibrated release (τ too low, clip too loose) could pass a check
    against the claim alone. `overspent`: the release's per-order RDP on this batch exceeds what the
    accounted parameters (τ, c, s, SVT) spend on the very same steps (`accounted`, its ε) — a `violation`
    whatever the claim's slack; else `violation` above the claim (float slack 1e-9), `consistent`
    otherwise. Exact, so there is no power to report: `epsilon_detectable` is null."""
    if overspent:
        reason = (
            f"this batch spent ε = {fmt(measured)}, more than its accounted parameters allow on the same "
            f"steps (ε = {fmt(accounted)}): the release is not the mechanism it accounts for"
        )
        return Judgement("violation", reason, f"Violation: {reason}", measured, None, claimed)
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
    return Judgement("consistent", reason, head, measured, None, claimed)
