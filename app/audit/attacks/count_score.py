"""The Ṽ_y+-only white-box score of private voting: attacks `copy_count`, `rare_token_count`,
`inquiry_count` and `signal_text_count` (issue 19).

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

Label-constrained teachers: attacks `copy_constrained`, `rare_token_constrained`, `inquiry_constrained`,
`signal_text_constrained` (and `…_constrained_count`, both changes). The base design's query, asked of
private voting whose teachers answer within the label set (`AuditQuery.constrained`,
`PrivateVoting.label_probs`): at τ = 0 each partition votes argmax_k log P(t_k | prompt) over the labels'
token sequences, at τ > 0 a draw from softmax_k(log P(t_k | prompt)/τ): 003 §3.4's constrained output,
done by scoring only the label tokens instead of asking for it in the prompt. Every partition then casts
a valid vote, so a canary that flips its partition moves two counts (003 Lemma 3.1's [1, T−1] against
[0, T]) where a free-running small model, without the canary, casts none. This audits that deployment
of private voting (a classifier reading label log-probabilities), not one that parses free text; its
noise and Δ₂ = √2 are the same (each partition still casts one vote), so the claim is the same. `auto`
never picks these: they change the system under audit, not the attack.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from types import ModuleType
from typing import Any

import numpy as np

SUFFIX = "_count"
CONSTRAINED = "_constrained"
BASES = ("copy", "rare_token", "inquiry", "signal_text")
# each variant: (suffix, the AuditQuery fields it changes)
VARIANTS = {
    SUFFIX: {"other_weight": 0.0},
    CONSTRAINED: {"constrained": True},
    CONSTRAINED + SUFFIX: {"constrained": True, "other_weight": 0.0},
}
NAMES = tuple(f"{b}{v}" for v in VARIANTS for b in BASES)


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
    """An attack module for `name`: its base design's query with `other_weight` 0 (white box = Ṽ_y+)
    and/or `constrained` (label-constrained teachers), module docstring."""
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
