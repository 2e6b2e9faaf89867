"""A teacher's vote as real decoding produces it (003 Alg. 2 lines 3–6: each partition's answer is
parsed into a vote; an answer outside the label set casts none).

A label k is the token sequence t_k = (t_{k,1}, …, t_{k,m_k}) (the engine's own tokenization of the
label string, appended after the prompt as `label_logprobs` scores it). Sampling at temperature τ
draws each token from softmax(ℓ^{(j)}/τ) over the **whole vocabulary**, ℓ^{(j)} the next-token
log-probabilities after the prompt and t_{k,<j}, so the generation starts with t_k with probability

    P_τ(t_k) = Π_j exp(ℓ^{(j)}_{t_{k,j}}/τ) / Σ_v exp(ℓ^{(j)}_v/τ),

and at τ = 0 (greedy) P_0(t_k) = Π_j 1[t_{k,j} = argmax_v ℓ^{(j)}_v]: a label wins with probability 1
when the greedy path spells it, and the vote is invalid only when the greedy path leaves the label
set. P(invalid) = 1 − Σ_k P(vote k). At τ = 1 this is exp(label_logprobs) exactly (the product of
the model's own token probabilities), so the τ = 1 votes need no full distribution.

Decisions (multi-token labels): a generation votes for the label its tokens start with (what follows
the label is not read); when one label's tokens are a prefix of another's ("1" and "10"), the longest
match wins, P(vote k) = P_τ(t_k) − Σ_{k' minimal proper extension of k} P_τ(t_{k'}). A generation
that spells a label with another tokenization counts as invalid (τ = 1 scoring makes the same choice).

Engines without a vocabulary (the oracle and simulated engines, which spread all their mass over
the labels, and top-k HTTP engines) give only the label scores: `label_distribution` then treats the
mass outside the labels as one more outcome, r = 1 − Σ_k exp(ℓ_k), tempered like a token. That is
exact when r = 0 (oracle, simulated) and at τ = 1; otherwise an approximation that puts the outside
mass on one token (Σ_i r_i^{1/τ} ≤ r^{1/τ} for τ < 1, so there it overstates the invalid share, and
understates it for τ > 1; at τ = 0 it calls a vote invalid when r beats every label).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.special import logsumexp

Ids = tuple[int, ...]


def tempered_token_logprobs(logprobs: np.ndarray, token_ids: Sequence[int], temperature: float) -> np.ndarray:
    """log softmax(ℓ/τ)_t for each token t of one full next-token log-distribution ℓ (V,);
    τ = 0: 0 for the argmax (first one on ties, as torch.argmax), −inf for every other token."""
    logprobs = np.asarray(logprobs, dtype=np.float64)
    ids = np.asarray(token_ids, dtype=np.int64)
    if temperature == 0:
        return np.where(ids == int(np.argmax(logprobs)), 0.0, -np.inf)
    scaled = logprobs / temperature
    return scaled[ids] - logsumexp(scaled)


def label_prefixes(label_ids: Sequence[Ids]) -> list[Ids]:
    """The distinct token prefixes after which a next-token distribution is needed: t_{k,<j} for
    every label k and step j (the empty prefix first)."""
    return list(dict.fromkeys(lid[:j] for lid in label_ids for j in range(len(lid))))


def sequence_logprobs(
    step_logprobs: dict[Ids, np.ndarray], label_ids: Sequence[Ids], temperature: float
) -> np.ndarray:
    """log P_τ(t_k) for each label from the full next-token log-distributions after one prompt and
    each label prefix (`step_logprobs[prefix]`, shape (V,)). Shape (K,)."""
    out = np.zeros(len(label_ids))
    for k, lid in enumerate(label_ids):
        for j, token in enumerate(lid):
            out[k] += tempered_token_logprobs(step_logprobs[lid[:j]], [token], temperature)[0]
    return out


def longest_match(prefix_probs: np.ndarray, label_ids: Sequence[Ids]) -> np.ndarray:
    """P(vote k) from P_τ(generation starts with t_k), (n, K): labels that are token prefixes of other
    labels lose the mass of their minimal proper extensions (the longest match wins)."""
    probs = np.array(prefix_probs, dtype=np.float64, copy=True)
    for k, lid in enumerate(label_ids):
        longer = [
            j for j, other in enumerate(label_ids) if len(other) > len(lid) and other[: len(lid)] == lid
        ]
        minimal = [
            j
            for j in longer
            if not any(i != j and label_ids[j][: len(label_ids[i])] == label_ids[i] for i in longer)
        ]
        if minimal:
            probs[:, k] -= prefix_probs[:, minimal].sum(axis=1)
    return np.clip(probs, 0.0, 1.0)


def label_distribution(logprobs: np.ndarray, temperature: float) -> np.ndarray:
    """Vote probabilities (n, K) from label scores only (no vocabulary); 1 − row sum = an invalid vote.

    The outcomes are the K labels and one "outside" outcome with the rest of the mass r (see the module
    docstring): P(vote k) = exp(ℓ_k/τ) / (Σ_j exp(ℓ_j/τ) + r^{1/τ}); τ = 0: the argmax of (ℓ, log r).
    """
    logprobs = np.asarray(logprobs, dtype=np.float64)
    with np.errstate(divide="ignore"):
        rest = np.log(np.clip(1.0 - np.exp(logprobs).sum(axis=1, keepdims=True), 0.0, 1.0))
    outcomes = np.concatenate([logprobs, rest], axis=1)
    if temperature == 0:
        choice = np.zeros_like(outcomes)
        choice[np.arange(len(outcomes)), np.argmax(outcomes, axis=1)] = 1.0
    else:
        scaled = outcomes / temperature
        choice = np.exp(scaled - logsumexp(scaled, axis=1, keepdims=True))
    return choice[:, :-1]


def parse_vote(token_ids: Sequence[int], label_ids: Sequence[Ids]) -> int:
    """The vote a generation casts under the rule above: the index of the longest label whose tokens
    start the generation, −1 (invalid) if none does."""
    generated = tuple(token_ids)
    best, best_len = -1, 0
    for k, lid in enumerate(label_ids):
        if len(lid) > best_len and generated[: len(lid)] == lid:
            best, best_len = k, len(lid)
    return best
