"""Canary design: the measured canary effect (`signal`) and `attack: {"name": "auto"}` (issue 19).

`signal` (every private-voting audit of one canary): the clean pool's canary effect, the probability that
the canary's partition votes the canary's answer y+ with the canary (C1) and without it (C0), at the
mechanism's decoding temperature:

    p_with = P(vote = y+ | partition k* of C1),  p_without = P(vote = y+ | partition k* of C0),

k* the one partition whose prompt differs (`valid_with`, `valid_without`: the probability that its vote is
one of the answers at all; an invalid vote casts none). 003 Lemma 3.1: an audit reaches the mechanism's own ε only
when effect = p_with − p_without = 1 (a deterministic flip, [1, T−1] against [0, T] votes); below that
the attack sees a mixture and ε_emp falls with the effect.

`auto` (docs/results/soundness.md, "Design selection"): the design (AUTO_DESIGNS) and T (AUTO_PARTITIONS,
capped by the request's) are chosen on a pilot that the measurement does not reuse:

1. records: the dataset's training rows split by index parity, odd rows for the pilot, even rows for
   the measurement (`pilot_records`, `measurement_records`): no record is in both;
2. randomness: the pilot draws its contexts and partitions from its own seed stream (`pilot`, appended
   to app/audit/seeds.py), which the measurement never reads;
3. rule: each candidate (design, T) is scored on PILOT_CONTEXTS pilot context pairs by the exact
   population μ of private voting (003 Alg. 2 with the request's σ; app/audit/stats/exact.py) summed
   over the requested threat models; the largest mean wins (the first on ties). A design the engine
   refuses (an AuditError, e.g. the simulated engine and the copy query) is skipped. With the white box
   requested, each (design, T) is scored twice from the same pilot votes, once per white-box score: 003
   §3.2's Ṽ_y+ − Ṽ_other (the design itself) and Ṽ_y+ alone (`<design>_count`,
   app/audit/attacks/count_score.py, exact μ by `exact_count_mu`). Of the two, the Neyman-Pearson score of
   the vote pattern the pilot sees wins: Ṽ_y+ − Ṽ_other when the canary moves a vote from another label
   (V_in − V_out = e_y+ − e_other, μ = √2/σ), Ṽ_y+ when the partition without the canary casts no vote
   (V_in − V_out = e_y+: μ = 1/σ against 1/(√2σ) for the difference).

The measurement is then an ordinary audit of the chosen design on the even records, its threshold
chosen on the held-out split as in every audit (thresholds.Split). Soundness: the choice is a function
of the pilot alone, independent of the measurement's records and streams, so given the choice the
measurement is a fixed-design audit whose violation probability is ≤ 1 − γ, hence also unconditionally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.contexts import build_contexts
from app.audit.runtime import AuditError
from app.audit.seeds import SeedTree
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"private_voting"})
AUTO_DESIGNS = ("copy", "rare_token", "inquiry", "signal_text")
AUTO_PARTITIONS = (2, 4, 8)
PILOT_CONTEXTS = 2


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    raise AuditError("attack.name: auto is resolved to a design before the audit's query is built")


def check_request(request: Any) -> None:
    if request.estimator == "exact":
        raise ValueError(
            "estimator: auto selection runs trials (bootstrap or direct), not the exact estimator"
        )
    if request.attack.canary is not None:
        raise ValueError("attack.canary: auto draws its canaries from the dataset's records")


def pilot_records(dataset: Dataset) -> Dataset:
    """The pilot's records: the odd training rows."""
    return replace(dataset, train=dataset.train[1::2])


def measurement_records(dataset: Dataset) -> Dataset:
    """The measurement's records: the even training rows (disjoint from the pilot's)."""
    return replace(dataset, train=dataset.train[0::2])


def canary_signal(
    mechanism: Any, query: AuditQuery, prompts_in: list, prompts_out: list, source: Any
) -> dict | None:
    """The clean pool's canary effect (module docstring) from the label distributions the audit already
    holds (CleanSource caches them: no forward pass is added); None for a mechanism without votes."""
    label_probs = getattr(mechanism, "label_probs", None)
    differing = [k for k, (a, b) in enumerate(zip(prompts_in, prompts_out, strict=True)) if a != b]
    if label_probs is None or len(differing) != 1:
        return None
    k = differing[0]
    p_in = label_probs([prompts_in[k]], query.answers, source)[0]
    p_out = label_probs([prompts_out[k]], query.answers, source)[0]
    with_, without = float(p_in[query.positive]), float(p_out[query.positive])
    return {
        "answer": query.answers[query.positive],
        "p_with": with_,
        "p_without": without,
        "effect": with_ - without,
        "valid_with": float(p_in.sum()),  # P(the partition's vote is one of the answers at all)
        "valid_without": float(p_out.sum()),
        "temperature": getattr(mechanism, "temperature", None),
    }


@dataclass
class Choice:
    """The pilot's choice and every candidate's pilot score."""

    attack: str
    partitions: int
    candidates: list[dict] = field(default_factory=list)
    forward_passes: int = 0

    def as_dict(self) -> dict:
        return {
            "attack": self.attack,
            "partitions": self.partitions,
            "rule": "largest mean exact μ (sum over the threat models) on the pilot, per design, T and "
            "white-box score (Ṽ_y+ − Ṽ_other, or Ṽ_y+ for a *_count attack)",
            "pilot_contexts": PILOT_CONTEXTS,
            "pilot_records": "odd training rows (the measurement uses the even ones)",
            "pilot_forward_passes": self.forward_passes,
            "candidates": self.candidates,
        }


def partition_candidates(requested: int, shots: int, n_train: int) -> list[int]:
    """T values the pilot tries: AUTO_PARTITIONS up to the request's T, and the request's T."""
    values = sorted({t for t in AUTO_PARTITIONS if t <= requested} | {requested})
    return [t for t in values if t * shots + 1 <= n_train]


def _pilot_score(
    request: Any, design: str, partitions: int, dataset: Dataset, llm: Any, seeds: SeedTree
) -> tuple[float, float, float]:
    """(mean exact μ summed over the threat models with the Ṽ_y+ − Ṽ_other white-box score, the same with
    the Ṽ_y+ score, mean canary effect) of one candidate on the pilot."""
    from app.audit.attacks.count_score import exact_count_mu
    from app.audit.attacks.registry import attack_module
    from app.audit.mechanisms.base import CleanSource
    from app.audit.mechanisms.registry import build_mechanism
    from app.audit.stats.exact import exact_vote_audit

    spec = request.attack.model_copy(update={"name": design})
    mech_spec = request.mechanism.model_copy(update={"partitions": partitions})
    module = attack_module(design)
    rng = seeds.rng("pilot")  # every candidate starts from the same pilot state
    mus, count_mus, effects = [], [], []
    for _ in range(PILOT_CONTEXTS):
        mechanism = build_mechanism(mech_spec, epsilon=request.epsilon, delta=request.delta)
        contexts = build_contexts(dataset, mechanism.context_size(mech_spec), rng, None)
        if hasattr(module, "plant"):
            contexts = module.plant(contexts, dataset, spec, rng)
        query = module.build_query(canary=contexts.canary, dataset=dataset, spec=spec, rng=rng)
        parts_in, parts_out = mechanism.partition(contexts, rng)
        source = CleanSource(llm, None, seed=seeds.integer("pilot"))
        prompts_in, prompts_out = (
            mechanism.audit_inputs(query, parts_in),
            mechanism.audit_inputs(query, parts_out),
        )
        probs_in = mechanism.label_probs(prompts_in, query.answers, source)
        probs_out = mechanism.label_probs(prompts_out, query.answers, source)
        target = mechanism.binary_target(query, source)
        exact = exact_vote_audit(
            probs_in,
            probs_out,
            sigma=mechanism.std,
            target=target.positive,
            other=target.negative,
            delta=request.delta,
        )
        tm = request.attack.threat_model
        mu = (exact.mu_black_box if tm != "white_box" else 0.0) + (
            exact.mu_white_box if tm != "black_box" else 0.0
        )
        mus.append(mu if np.isfinite(mu) else 0.0)
        count_mu = (exact.mu_black_box if tm != "white_box" else 0.0) + (
            exact_count_mu(probs_in, probs_out, sigma=mechanism.std, target=target.positive)
            if tm != "black_box"
            else 0.0
        )
        count_mus.append(count_mu if np.isfinite(count_mu) else 0.0)
        signal = canary_signal(mechanism, query, prompts_in, prompts_out, source)
        effects.append(signal["effect"] if signal else 0.0)
    return float(np.mean(mus)), float(np.mean(count_mus)), float(np.mean(effects))


def choose(
    request: Any, dataset: Dataset, llm: Any, seeds: SeedTree, designs: Sequence[str] = AUTO_DESIGNS
) -> Choice:
    """The pilot's (design, T): see the module docstring."""
    from app.audit.attacks.count_score import SUFFIX
    from app.audit.attacks.registry import ATTACKS, attack_module

    pilot = pilot_records(dataset)
    passes_before = llm.counters.forward_passes
    best: tuple[float, str, int] | None = None
    candidates = []
    for design in designs:
        if request.mechanism.name not in attack_module(design).MECHANISMS:
            continue
        for t in partition_candidates(
            request.mechanism.partitions, request.mechanism.shots_per_partition, len(pilot.train)
        ):
            try:
                mu, count_mu, effect = _pilot_score(request, design, t, pilot, llm, seeds)
            except AuditError as exc:  # the design cannot run here (e.g. the engine refuses its query)
                candidates.append({"attack": design, "partitions": t, "skipped": str(exc)[:200]})
                break
            scored = [(design, mu)]
            if request.attack.threat_model != "black_box" and f"{design}{SUFFIX}" in ATTACKS:
                scored.append((f"{design}{SUFFIX}", count_mu))  # the same votes, the Ṽ_y+ score
            for name, value in scored:
                candidates.append(
                    {"attack": name, "partitions": t, "pilot_mu": value, "pilot_effect": effect}
                )
                if best is None or value > best[0]:
                    best = (value, name, t)
    if best is None:
        raise AuditError("attack.name: auto found no design this model and dataset can run")
    return Choice(best[1], best[2], candidates, llm.counters.forward_passes - passes_before)
