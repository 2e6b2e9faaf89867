"""From a membership test's outcomes to a privacy lower bound.

- Clopper-Pearson one-sided binomial bounds (exact, via the Beta quantile).
- Gaussian-DP lower bound (003 §2): with one-sided upper bounds ᾱ on the FPR and β̄ on the FNR, each at
  level (1−γ)/2 so the pair holds jointly with confidence γ,

      μ_lower = Φ⁻¹(1 − β̄) − Φ⁻¹(ᾱ)      (0 when negative — never an absolute value),

  then ε_empirical = the smallest ε with δ(ε; μ_lower) ≤ δ (accounting/gdp.py). Valid only when the
  mechanism's privacy curve is Gaussian (the Gaussian-noise mechanisms and their post-processing): for
  others it can overstate ε — randomized response at exactly (1, 0)-DP has TPR 0.731 / FPR 0.269, which
  this route turns into ε = 5.58.
- Assumption-free lower bound (Kairouz, Oh & Viswanath 2015, Thm 2.1: (ε, δ)-DP ⇔ TPR ≤ e^ε·FPR + δ and
  TNR ≤ e^ε·FNR + δ for every test): with the same pair of one-sided bounds, TPR ≥ TPR_lower = 1 − β̄ and
  FPR ≤ ᾱ, every (ε, δ)-DP with

      ε < ε_af = max(0, ln((TPR_lower − δ)/ᾱ), ln((1 − ᾱ − δ)/(1 − TPR_lower)))

  is refuted at joint confidence γ, whatever the mechanism (Jagielski, Ullman & Oprea 2020, §3).
- The verdict rule (`verdict_epsilon`): GDP only under `assumption="gdp"` (a known Gaussian mechanism),
  the assumption-free bound otherwise; `per_test_confidence` splits γ over the tests of one verdict.
- Point estimate ε_point = log(TPR/FPR) (003 §2), unbounded when FPR = 0.
- The auditor accuracy that ContextLeak reports (002 App. A.1, H.4).

No one-run bound (Steinke, Nasr & Jagielski 2023): its setting is one mechanism run with m canaries each
included by an independent fair coin, worth it when a run is a training run. Here every trial is its own
mechanism call with fixed, balanced membership, which the two-sample bounds above cover; read on the
accuracy of such trials it is looser whenever the errors are unbalanced (TPR 0.9 / FPR 0 on 1,000 trials
per side: ε ≥ 2.77 against 5.48 assumption-free), so no audit used it and it was removed.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import Literal, Protocol

import numpy as np
from scipy import special

from app.audit.accounting.gdp import epsilon_for_mu

Assumption = Literal["gdp", "none"]
"""Which lower bound a verdict rests on: "gdp" (the mechanism is known to be Gaussian) or "none"."""
ASSUMPTIONS: tuple[str, ...] = ("gdp", "none")


@dataclass(frozen=True)
class Counts:
    """Outcomes of a membership test: C1 (canary in) trials split into tp/fn, C0 (out) into fp/tn."""

    tp: int
    fn: int
    fp: int
    tn: int

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if int(value) != value or value < 0:
                raise ValueError(f"{f.name} must be a non-negative integer, got {value}")

    @property
    def n_in(self) -> int:
        return self.tp + self.fn

    @property
    def n_out(self) -> int:
        return self.fp + self.tn


@dataclass(frozen=True)
class PrivacyBound:
    """A lower bound on a mechanism's privacy loss with the evidence behind it.

    Both lower bounds come from the same two one-sided Clopper-Pearson bounds, so they hold jointly at
    `confidence`: `epsilon_empirical` (GDP route, valid for Gaussian mechanisms) and
    `epsilon_empirical_assumption_free` (valid for every mechanism). `assumption` names the one that chose
    the threshold and that the verdict uses (`epsilon_lower`, also in `as_dict()`).

    `epsilon_point` is None when FPR = 0 (unbounded). `as_dict()` is JSON-ready: non-finite floats become
    None with a `<field>_unbounded: true` flag, and `biased` says whether the threshold was chosen on the
    same data it was evaluated on (the in_sample strategy).
    """

    tpr: float
    fpr: float
    mu_lower: float
    epsilon_empirical: float
    epsilon_empirical_assumption_free: float
    epsilon_point: float | None
    threshold: float | None
    threshold_strategy: str
    auc: float | None
    accuracy: float
    confidence: float
    delta: float
    n_in: int
    n_out: int
    counts: Counts
    assumption: Assumption = "gdp"

    @property
    def biased(self) -> bool:
        return self.threshold_strategy == "in_sample"

    @property
    def epsilon_lower(self) -> float:
        """The lower bound the verdict compares with a claim: `verdict_epsilon` under `self.assumption`."""
        return verdict_epsilon(self, self.assumption)

    def as_dict(self) -> dict:
        out: dict = {}
        for key, value in (asdict(self) | {"epsilon_lower": self.epsilon_lower}).items():
            if isinstance(value, float) and not math.isfinite(value):
                out[key] = None
                out[f"{key}_unbounded"] = True
            else:
                out[key] = value
        if self.epsilon_point is None:
            out["epsilon_point_unbounded"] = True
        out["biased"] = self.biased
        return out


def clopper_pearson_upper(k: int, n: int, alpha: float) -> float:
    """One-sided (1−α) upper bound on a binomial rate from k successes in n: Beta(1−α; k+1, n−k), 1 if k = n."""
    _check_kn(k, n, alpha)
    return 1.0 if k >= n else float(special.betaincinv(k + 1, n - k, 1 - alpha))


def clopper_pearson_lower(k: int, n: int, alpha: float) -> float:
    """One-sided (1−α) lower bound on a binomial rate from k successes in n: Beta(α; k, n−k+1), 0 if k = 0."""
    _check_kn(k, n, alpha)
    return 0.0 if k <= 0 else float(special.betaincinv(k, n - k + 1, alpha))


def rate_bounds(
    tp: np.ndarray, n_in: int, fp: np.ndarray, n_out: int, alpha: float
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorized one-sided Clopper-Pearson uppers (β̄ on the FNR from fn = n_in − tp, ᾱ on the FPR), each at
    level α; TPR_lower = 1 − β̄. Both lower bounds below are functions of this one pair."""
    tp = np.asarray(tp, dtype=np.float64)
    fp = np.asarray(fp, dtype=np.float64)
    fn = n_in - tp
    fnr_ub = np.where(fn >= n_in, 1.0, special.betaincinv(fn + 1, np.maximum(n_in - fn, 1e-300), 1 - alpha))
    fpr_ub = np.where(fp >= n_out, 1.0, special.betaincinv(fp + 1, np.maximum(n_out - fp, 1e-300), 1 - alpha))
    return fnr_ub, fpr_ub


def gdp_mu_lower(tp: np.ndarray, n_in: int, fp: np.ndarray, n_out: int, alpha: float) -> np.ndarray:
    """Vectorized μ_lower = max(0, Φ⁻¹(1 − β̄) − Φ⁻¹(ᾱ)) with each one-sided Clopper-Pearson bound at level α.

    β̄ bounds the FNR from fn = n_in − tp; ᾱ bounds the FPR from fp. Φ⁻¹(1 − β̄) is computed as −Φ⁻¹(β̄).
    """
    return mu_from_rates(*rate_bounds(tp, n_in, fp, n_out, alpha))


def mu_from_rates(fnr_upper: np.ndarray, fpr_upper: np.ndarray) -> np.ndarray:
    """μ = max(0, −Φ⁻¹(FNR) − Φ⁻¹(FPR)) (003 §2), vectorized; NaN (both rates 1) reads as 0."""
    with np.errstate(invalid="ignore"):
        mu = -special.ndtri(fnr_upper) - special.ndtri(fpr_upper)
    return np.where(np.isnan(mu), 0.0, np.maximum(mu, 0.0))


def assumption_free_epsilon(fnr_upper: np.ndarray, fpr_upper: np.ndarray, delta: float) -> np.ndarray:
    """ε_af = max(0, ln((1 − FNR − δ)/FPR), ln((1 − FPR − δ)/FNR)), vectorized (Kairouz et al. 2015, Thm 2.1).

    Every (ε, δ)-DP mechanism has TPR ≤ e^ε·FPR + δ and TNR ≤ e^ε·FNR + δ, so with TPR ≥ 1 − FNR_upper and
    FPR ≤ FPR_upper (and hence TNR ≥ 1 − FPR_upper, FNR ≤ FNR_upper) every ε < ε_af is refuted. With exact
    rates it is the exact ε of the test; a zero denominator gives ∞.
    """
    fnr = np.asarray(fnr_upper, dtype=np.float64)
    fpr = np.asarray(fpr_upper, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        direct = np.log(np.maximum(1.0 - fnr - delta, 0.0)) - np.log(fpr)
        mirror = np.log(np.maximum(1.0 - fpr - delta, 0.0)) - np.log(fnr)
    eps = np.fmax(direct, mirror)  # fmax ignores a NaN (0/0) side
    return np.where(np.isnan(eps), 0.0, np.maximum(eps, 0.0))


def assumption_free_epsilon_lower(
    tp: np.ndarray, n_in: int, fp: np.ndarray, n_out: int, alpha: float, delta: float
) -> np.ndarray:
    """Vectorized ε_af from counts, each one-sided Clopper-Pearson bound at level α (pair: 1 − 2α)."""
    return assumption_free_epsilon(*rate_bounds(tp, n_in, fp, n_out, alpha), delta)


class _BothBounds(Protocol):  # read-only, so frozen dataclasses match
    @property
    def epsilon_empirical(self) -> float: ...

    @property
    def epsilon_empirical_assumption_free(self) -> float: ...


def verdict_epsilon(bound: _BothBounds, assumption: Assumption) -> float:
    """The one verdict rule: the GDP bound only when `assumption == "gdp"` (the mechanism is known to be a
    Gaussian mechanism or its post-processing, where the GDP conversion is exact), else the assumption-free
    bound, which holds for any mechanism (the GDP route can overstate ε for, e.g., randomized response)."""
    if assumption == "gdp":
        return bound.epsilon_empirical
    if assumption == "none":
        return bound.epsilon_empirical_assumption_free
    raise ValueError(f"assumption must be one of {', '.join(ASSUMPTIONS)}, got {assumption!r}")


def per_test_confidence(confidence: float, n_tests: int) -> float:
    """Bonferroni: each of `n_tests` bounds at 1 − (1 − γ)/n_tests, so a verdict that is the OR of their
    violations (e.g. mia's black-box and white-box tests) errs with probability ≤ 1 − γ in all (union
    bound); at the full γ each, the OR's false-alarm rate could reach n_tests·(1 − γ)."""
    _check_confidence(confidence)
    if n_tests < 1:
        raise ValueError(f"n_tests must be ≥ 1, got {n_tests}")
    return 1 - (1 - confidence) / n_tests


def epsilon_point_estimate(counts: Counts) -> float | None:
    """ε_point = log(TPR/FPR) (003 §2); None (unbounded) when FPR = 0 < TPR; 0 when the test never fires
    or fires more often on C0 than on C1 (a negative log-ratio is no evidence of leakage)."""
    tpr = counts.tp / counts.n_in
    fpr = counts.fp / counts.n_out
    if tpr == 0:
        return 0.0
    if fpr == 0:
        return None
    return max(0.0, math.log(tpr / fpr))


def gdp_bound_from_counts(
    counts: Counts,
    *,
    confidence: float = 0.95,
    delta: float = 1e-5,
    threshold: float | None = None,
    threshold_strategy: str = "counts",
    auc: float | None = None,
    assumption: Assumption = "gdp",
) -> PrivacyBound:
    """Both lower bounds (GDP, 003 §2; assumption-free) at joint confidence γ: each one-sided bound at
    (1 − γ)/2, shared by the two. `assumption` is recorded for the verdict (`PrivacyBound.epsilon_lower`)."""
    _check_confidence(confidence)
    _check_assumption(assumption)
    if counts.n_in == 0 or counts.n_out == 0:
        raise ValueError("counts need at least one C1 trial (tp + fn > 0) and one C0 trial (fp + tn > 0)")
    alpha = (1 - confidence) / 2
    fnr_ub, fpr_ub = rate_bounds(
        np.array([counts.tp]), counts.n_in, np.array([counts.fp]), counts.n_out, alpha
    )
    mu = float(mu_from_rates(fnr_ub, fpr_ub)[0])
    return PrivacyBound(
        tpr=counts.tp / counts.n_in,
        fpr=counts.fp / counts.n_out,
        mu_lower=mu,
        epsilon_empirical=epsilon_for_mu(mu, delta),
        epsilon_empirical_assumption_free=float(assumption_free_epsilon(fnr_ub, fpr_ub, delta)[0]),
        epsilon_point=epsilon_point_estimate(counts),
        threshold=threshold,
        threshold_strategy=threshold_strategy,
        auc=auc,
        accuracy=auditor_accuracy(counts),
        confidence=confidence,
        delta=delta,
        n_in=counts.n_in,
        n_out=counts.n_out,
        counts=counts,
        assumption=assumption,
    )


def epsilon_upper_from_counts(
    counts: Counts, *, confidence: float = 0.95, delta: float = 1e-5, assumption: Assumption = "gdp"
) -> float:
    """An upper confidence bound, at joint confidence γ, on the ε that this test's true rates show: the
    mirror of the lower bounds above. Each rate gets its one-sided Clopper-Pearson *lower* bound at level
    (1 − γ)/2 (FNR from fn, FPR from fp), and the same functional as the lower bound under `assumption`
    (GDP μ = −Φ⁻¹(FNR) − Φ⁻¹(FPR) then ε at δ; or the assumption-free ε_af), which decreases in both rates,
    is read at them. With probability ≥ γ both true rates lie above their bounds, so the ε of the test's
    true rates is at most this. It bounds what this attack, at this threshold, shows with unlimited
    trials — not the system's ε, which no audit bounds from above. ∞ when no error of one kind was seen
    (a lower rate bound of 0)."""
    _check_confidence(confidence)
    _check_assumption(assumption)
    if counts.n_in == 0 or counts.n_out == 0:
        raise ValueError("counts need at least one C1 trial (tp + fn > 0) and one C0 trial (fp + tn > 0)")
    alpha = (1 - confidence) / 2
    fnr_lo = clopper_pearson_lower(counts.fn, counts.n_in, alpha)
    fpr_lo = clopper_pearson_lower(counts.fp, counts.n_out, alpha)
    if fnr_lo <= 0 or fpr_lo <= 0:
        return math.inf
    rates = (np.array([fnr_lo]), np.array([fpr_lo]))
    if assumption == "none":
        return float(assumption_free_epsilon(*rates, delta)[0])
    return epsilon_for_mu(float(mu_from_rates(*rates)[0]), delta)


def auditor_accuracy(counts: Counts) -> float:
    """Fraction of correct membership guesses, (TP + TN)/n (ContextLeak's auditor accuracy, 002 Alg. 1).

    0.5 is guessing when C1 and C0 are equally likely; 002 reads 2·accuracy − 1 as its leakage measure.
    """
    total = counts.n_in + counts.n_out
    return (counts.tp + counts.tn) / total if total else 0.0


def _check_kn(k: int, n: int, alpha: float) -> None:
    if not 0 <= k <= n or n < 1:
        raise ValueError(f"need 0 ≤ k ≤ n and n ≥ 1, got k={k}, n={n}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


def _check_assumption(assumption: str) -> None:
    if assumption not in ASSUMPTIONS:
        raise ValueError(f"assumption must be one of {', '.join(ASSUMPTIONS)}, got {assumption!r}")


def _check_confidence(confidence: float) -> None:
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
