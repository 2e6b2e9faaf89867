"""Do the simulated votes match real decoding? The mechanism's own vote simulation against the engine's
sampling, on one prompt and label set (the check behind mechanisms/decoding.py).

For temperature τ: `draws` simulated votes — `PlainICL(temperature=τ).collect`, one partition per
call, i.e. what every voting mechanism draws its clean vote vectors from — and `draws` real
generations of the engine at τ (`max_new_tokens` = the longest label), each parsed into a vote by
`parse_vote` (longest label the generation starts with, else invalid).

Tolerance, exact and distribution-free: under H0 (both samples i.i.d. from one categorical law, equal
sizes N), the real count a of an outcome given its total a + b over both samples is
Binomial(a + b, 1/2); `p_two_sample` is that test's two-sided p-value. `p_predicted` tests the real
count against the predicted probability, Binomial(N, p). At τ = 0 both are degenerate: greedy
decoding is deterministic, so the frequencies must be equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest

from app.audit.mechanisms.base import CleanSource, label_distribution
from app.audit.mechanisms.decoding import parse_vote
from app.audit.mechanisms.plain import PlainICL
from app.engines.protocol import LLMEngine, Prompt, Sampling


@dataclass(frozen=True)
class Fidelity:
    """Per outcome (the labels, then "invalid"): predicted probability, the τ = 1 label-mass prediction
    that votes were simulated from before (`label_distribution` of the label scores with the valid share
    of τ = 1), simulated and real frequencies, and the two p-values (module docstring)."""

    temperature: float
    draws: int
    outcomes: tuple[str, ...]
    predicted: tuple[float, ...]
    predicted_before: tuple[float, ...]
    simulated: tuple[float, ...]
    real: tuple[float, ...]
    p_two_sample: tuple[float, ...]
    p_predicted: tuple[float, ...]
    p_predicted_before: tuple[float, ...]


def _with_invalid(probs: np.ndarray) -> np.ndarray:
    return np.append(probs, max(0.0, 1.0 - float(probs.sum())))


def _p_value(count: int, n: int, p: float) -> float:
    if n == 0:
        return 1.0
    if p <= 0.0 or p >= 1.0:
        return float(count == (n if p >= 1.0 else 0))
    return float(binomtest(count, n, p).pvalue)


def previous_prediction(label_logprobs: np.ndarray, temperature: float) -> np.ndarray:
    """What the mechanisms simulated before decoding was modelled: the valid share Σ_k exp(ℓ_k) at τ = 1
    whatever τ, split over the labels by softmax(ℓ/τ) (τ = 0: argmax of the labels)."""
    valid = min(1.0, float(np.exp(label_logprobs).sum()))
    within = label_distribution(label_logprobs[None, :] - np.log(max(valid, 1e-300)), temperature)[0]
    return valid * within / max(float(within.sum()), 1e-300)


def compare(
    engine: LLMEngine, prompt: Prompt, labels: Sequence[str], temperature: float, draws: int, seed: int = 0
) -> Fidelity:
    """Simulated vs real votes of `prompt` at `temperature` (see the module docstring)."""
    source = CleanSource(engine, seed=seed)
    mechanism = PlainICL(temperature=temperature)
    predicted = _with_invalid(mechanism.label_probs([prompt], labels, source)[0])
    before = _with_invalid(previous_prediction(source.label_logprobs([prompt], labels)[0], temperature))
    votes = mechanism.collect([prompt], labels, source, draws, np.random.default_rng(seed))
    sim_counts = np.append(votes.sum(axis=0), draws - votes.sum()).astype(int)
    label_ids = [tuple(engine.encode(label)) for label in labels]  # type: ignore[attr-defined]
    longest = max(len(lid) for lid in label_ids)
    gens = engine.generate([prompt], Sampling(longest, temperature=temperature, seed=seed, n=draws))[0]
    real_votes = [parse_vote(g.token_ids, label_ids) for g in gens]
    real_counts = np.array([real_votes.count(k) for k in range(len(labels))] + [real_votes.count(-1)])
    return Fidelity(
        temperature=temperature,
        draws=draws,
        outcomes=(*labels, "invalid"),
        predicted=tuple(float(p) for p in predicted),
        predicted_before=tuple(float(p) for p in before),
        simulated=tuple(float(c) / draws for c in sim_counts),
        real=tuple(float(c) / draws for c in real_counts),
        p_two_sample=tuple(
            _p_value(int(a), int(a + b), 0.5) for a, b in zip(real_counts, sim_counts, strict=True)
        ),
        p_predicted=tuple(
            _p_value(int(a), draws, float(p)) for a, p in zip(real_counts, predicted, strict=True)
        ),
        p_predicted_before=tuple(
            _p_value(int(a), draws, float(p)) for a, p in zip(real_counts, before, strict=True)
        ),
    )
