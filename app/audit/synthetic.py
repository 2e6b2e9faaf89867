"""DP synthetic text generation (Amin et al. 2024, Alg. 2; 001 App. C.1 Alg. 1) and its
data-dependent Rényi audit (001 App. C.3.3, Eq. 7).

One step of Alg. 1 on a batch D of s prompts with per-prompt next-token logits z_p:

    clip_c(z)_i = max{−c, z_i − max_j z_j + c},      z̄ = (1/s) Σ_{p ∈ D} clip_c(z_p),
    x ~ softmax(z̄ / τ).

The remove-one neighbour D ∖ {p} runs the same step on the s − 1 remaining prompts, so its
aggregate is the mean of the *same* clipped logits without p (no extra forward passes):

    z̄_{−p} = (Σ_q clip_c(z_q) − clip_c(z_p)) / (s − 1).

The per-step data-dependent RDP at order α is (001 Eq. 7)

    ε^{(t)}(D; α) = max_p D_α^↔( softmax(z̄/τ) ‖ softmax(z̄_{−p}/τ) ),

summed over all generated tokens (Thm C.7), converted by Thm C.8 and doubled by Thm C.9
(`app.audit.accounting.rdp.data_dependent_epsilon`).

Clipping is invariant to a constant shift of z, so next-token log-probabilities may stand in for logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.audit.accounting.rdp import symmetric_renyi
from app.engines.protocol import LLMEngine, Prompt


def clip_logits(logits: np.ndarray, clip: float) -> np.ndarray:
    """clip_c(z)_i = max{−c, z_i − max_j z_j + c} along the last axis (001 App. C.1)."""
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - np.max(logits, axis=-1, keepdims=True) + clip
    return np.maximum(-clip, shifted)


def log_softmax(scores: np.ndarray) -> np.ndarray:
    """log softmax along the last axis."""
    scores = np.asarray(scores, dtype=np.float64)
    top = np.max(scores, axis=-1, keepdims=True)
    return scores - top - np.log(np.sum(np.exp(scores - top), axis=-1, keepdims=True))


def aggregate(clipped: np.ndarray) -> np.ndarray:
    """ℓ(Z) = (1/s) Σ_p clip_c(z_p): the mean over the batch axis 0 of (s, V) clipped logits."""
    return np.asarray(clipped, dtype=np.float64).mean(axis=0)


def leave_one_out_aggregates(clipped: np.ndarray) -> np.ndarray:
    """z̄_{−p} for every p: row p is the mean of the clipped logits of all prompts but p, shape (s, V)."""
    clipped = np.asarray(clipped, dtype=np.float64)
    s = clipped.shape[0]
    if s < 2:
        raise ValueError("a remove-one neighbour needs a batch of at least 2 prompts")
    return (clipped.sum(axis=0, keepdims=True) - clipped) / (s - 1)


@dataclass(frozen=True)
class StepDistributions:
    """One step: log softmax(z̄/τ) (shape (V,)) and the s neighbours log softmax(z̄_{−p}/τ) (shape (s, V))."""

    log_p: np.ndarray
    log_neighbours: np.ndarray


def step_distributions(clipped: np.ndarray, temperature: float) -> StepDistributions:
    """The sampling distribution of Alg. 1 and its s remove-one neighbours from the same clipped logits."""
    return StepDistributions(
        log_p=log_softmax(aggregate(clipped) / temperature),
        log_neighbours=log_softmax(leave_one_out_aggregates(clipped) / temperature),
    )


def step_privacy_loss(dists: StepDistributions, alpha: float) -> float:
    """001 Eq. 7: max_p D_α^↔(A(D) ‖ A(D ∖ {p})) over the s neighbours of one step."""
    return max(float(symmetric_renyi(dists.log_p, q, alpha)) for q in dists.log_neighbours)


@dataclass(frozen=True)
class PrivateSequence:
    """One generated sequence: its token ids, text, and the per-step data-dependent RDP ε^{(t)}(D; α*)."""

    token_ids: tuple[int, ...]
    text: str
    step_losses: tuple[float, ...]


def generate_private_sequence(
    engine: LLMEngine,
    prompts: Sequence[str],
    *,
    clip: float,
    temperature: float,
    max_new_tokens: int,
    alpha: float,
    rng: np.random.Generator,
    stop_token_ids: frozenset[int] = frozenset(),
    on_token: Callable[[int], None] | None = None,
) -> PrivateSequence:
    """Alg. 1 repeated for up to T_max tokens on the batch `prompts`, with the Eq. 7 loss of every step.

    Each step is one batched forward pass over the s prompts continued by the tokens so far
    (`Prompt.continuation`); sampling stops early at a token in `stop_token_ids` (that step's loss counts,
    its token is not part of the text). `on_token(t)` is called after step t (progress/cancel).
    """
    generated: list[int] = []
    losses: list[float] = []
    for t in range(max_new_tokens):
        batch = [Prompt(text=p, continuation=tuple(generated)) for p in prompts]
        dists = engine.next_token_logprobs(batch, top_k="all")
        clipped = clip_logits(np.stack([d.logprobs for d in dists]), clip)
        step = step_distributions(clipped, temperature)
        losses.append(step_privacy_loss(step, alpha))
        token = int(rng.choice(step.log_p.shape[0], p=_probabilities(step.log_p)))
        if on_token is not None:
            on_token(t)
        if token in stop_token_ids:
            break
        generated.append(token)
    return PrivateSequence(tuple(generated), engine.decode(generated), tuple(losses))


def _probabilities(log_p: np.ndarray) -> np.ndarray:
    p = np.exp(log_p)
    return p / p.sum()
