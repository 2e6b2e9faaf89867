"""The Ṽ_y+-only white-box score of private voting: attacks `copy_count`, `rare_token_count`,
`inquiry_count` and `signal_text_count`.

Each is its base design (same canary, same query, same black-box test: the released label = y+) with one
change, the white-box score. 003 §3.2 scores Ṽ_y+ − Ṽ_other (Ṽ = V + N(0, σ²I), 003 App. 5 Alg. 2). That
is the Neyman-Pearson score when the canary moves one vote from "other" to y+, i.e. V_in − V_out =
e_y+ − e_other (003 Lemma 3.1's [1, T−1] against [0, T]): the log likelihood ratio of the Gaussian shift d
is (d·Ṽ)/σ² + const, so the optimal test thresholds d·Ṽ, here Ṽ_y+ − Ṽ_other, with separation
μ = ‖d‖/σ = √2/σ. When the partition without the canary casts no valid vote (a small model that answers
outside the label set), the shift is d = e_y+ and the same argument gives the score

    s(Ṽ) = Ṽ_y+ ,   μ = 1/σ,

while Ṽ_y+ − Ṽ_other sees the shift 1 under noise √2·σ, μ = 1/(√2 σ): the count score gains a factor √2
on the GDP scale. Which score a measurement uses is a design choice: `attack: auto` picks it on its pilot
(app/audit/design.py) by each score's exact population μ, never on the measured trials, so the bound stays
sound (the score is post-processing of the mechanism's release, fixed before the measurement).

The exact estimator (app/audit/stats/exact.py) computes the Ṽ_y+ − Ṽ_other score only, so these attacks
run with bootstrap or direct trials.

Teachers that answer within the label set are part of the system under audit, not of the attack:
`mechanism.teacher_output: "label_logprobs"` (mechanisms/private_voting.py). The names that once chose
them here (`<design>_constrained`, `<design>_constrained_count`) are refused with that pointer
(`retired`).
"""

from __future__ import annotations

import functools
from dataclasses import replace
from types import ModuleType
from typing import Any

import numpy as np

SUFFIX = "_count"
BASES = ("copy", "rare_token", "inquiry", "signal_text")
# each variant: (suffix, the AuditQuery fields it changes)
VARIANTS = {SUFFIX: {"other_weight": 0.0}}
NAMES = tuple(f"{b}{v}" for v in VARIANTS for b in BASES)
RETIRED = "_constrained"


def retired(name: str) -> str | None:
    """The refusal of a retired `<design>_constrained[_count]` name (None for any other name): the
    teachers' output is `mechanism.teacher_output`, and the attack is the name without `_constrained`."""
    for suffix, keep in ((RETIRED + SUFFIX, SUFFIX), (RETIRED, "")):
        if name.endswith(suffix) and name[: -len(suffix)] in BASES:
            attack = name[: -len(suffix)] + keep
            return (
                f"{name!r} is no longer an attack name: teachers that vote by their labels' log-probabilities "
                f'are part of the system under audit; use attack.name "{attack}" with '
                f'mechanism.teacher_output "label_logprobs"'
            )
    return None


def split_name(name: str) -> tuple[str, dict]:
    """(the base design, the query fields changed) of a variant: "inquiry_count" → ("inquiry", w = 0)."""
    for suffix in sorted(VARIANTS, key=len, reverse=True):
        if name.endswith(suffix) and name[: -len(suffix)] in BASES:
            return name[: -len(suffix)], VARIANTS[suffix]
    raise KeyError(name)


def base_name(name: str) -> str:
    """The design a variant asks ("inquiry_count" → "inquiry")."""
    return split_name(name)[0]


@functools.cache
def variant(name: str) -> ModuleType:
    """An attack module for `name`: its base design's query with `other_weight` 0 (white box = Ṽ_y+),
    module docstring."""
    from app.audit.attacks.registry import attack_module

    base_design, changes = split_name(name)
    base = attack_module(base_design)
    module = ModuleType(f"{__name__}.{name}", f"{base_design} with {changes}")
    module.MECHANISMS = frozenset({"private_voting"}) & base.MECHANISMS  # type: ignore[attr-defined]
    module.BASE = base_name(name)  # type: ignore[attr-defined]
    for attr in ("DEFAULT_CANARY", "plant"):
        if hasattr(base, attr):
            setattr(module, attr, getattr(base, attr))

    def build_query(*, canary: Any, dataset: Any, spec: Any, rng: np.random.Generator) -> Any:
        return replace(base.build_query(canary=canary, dataset=dataset, spec=spec, rng=rng), **changes)

    def check_request(request: Any) -> None:
        if hasattr(base, "check_request"):
            base.check_request(request)
        if request.estimator == "exact" and "other_weight" in changes:
            raise ValueError(
                f"estimator: {name} scores Ṽ_y+ alone; the exact estimator computes Ṽ_y+ − Ṽ_other only "
                "(use bootstrap or direct)"
            )

    module.build_query = build_query  # type: ignore[attr-defined]
    module.check_request = check_request  # type: ignore[attr-defined]
    return module


def count_distribution(label_probs: np.ndarray, target: int) -> np.ndarray:
    """Law of V_y+ = Σ_t 1[partition t votes y+] (Poisson-binomial over the T partitions), (T+1,)."""
    pmf = np.array([1.0])
    for p in np.clip(np.asarray(label_probs, dtype=np.float64)[:, target], 0.0, 1.0):
        pmf = np.convolve(pmf, [1.0 - p, p])
    return pmf


def exact_count_mu(
    label_probs_in: np.ndarray, label_probs_out: np.ndarray, *, sigma: float, target: int, grid: int = 801
) -> float:
    """Exact population μ of the white-box test s(Ṽ) = Ṽ_y+ > τ (module docstring), best τ on a grid:

    TPR(τ) = Σ_c P_in(V_y+ = c)·Φ̄((τ − c)/σ),  FPR(τ) = Σ_c P_out(V_y+ = c)·Φ̄((τ − c)/σ),
    μ = max_τ Φ⁻¹(TPR(τ)) − Φ⁻¹(FPR(τ))   (the GDP trade-off's μ at the best threshold, as exact.py does
    for Ṽ_y+ − Ṽ_other; deterministic votes V_in,y+ − V_out,y+ = 1 give μ = 1/σ exactly)."""
    from scipy import special, stats

    from app.audit.stats.exact import _probit

    pmf_in, pmf_out = count_distribution(label_probs_in, target), count_distribution(label_probs_out, target)
    counts = np.arange(len(pmf_in), dtype=np.float64)
    tau = np.linspace(-8.0 * sigma, counts[-1] + 8.0 * sigma, grid)
    z = (tau[:, None] - counts[None, :]) / sigma

    def tails(pmf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with np.errstate(divide="ignore"):
            logw = np.log(pmf)[None, :]
        return (
            special.logsumexp(logw + stats.norm.logsf(z), axis=1),
            special.logsumexp(logw + stats.norm.logcdf(z), axis=1),
        )

    curve = _probit(*tails(pmf_in)) - _probit(*tails(pmf_out))
    curve = np.where(np.isfinite(curve), curve, 0.0)
    return max(0.0, float(np.max(curve)))
