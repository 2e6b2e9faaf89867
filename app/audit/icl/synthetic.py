"""DP synthetic text generation (Amin et al. 2024; 001 App. C.1 Alg. 1) and its data-dependent Rényi audit
(001 App. C.3.3, Eq. 7).

One step of Alg. 1 on a batch D of s prompts with per-prompt next-token logits z_p:

    clip_c(z)_i = max{−c, z_i − max_j z_j + c},      z̄ = (1/s) Σ_{p ∈ D} clip_c(z_p),
    x ~ softmax(z̄ / τ).

The neighbour audited is the one the accounting covers. The theory (app/audit/accounting/rdp.py:
ρ = ½(c/(sτ))², ε_EM = 2c/(sτ), the SVT query moving by ≤ 1/s) takes the sum's sensitivity to one record as c/s, which holds
when the denominator stays the fixed batch size s (Amin et al. normalize by the expected batch size): D ∖ {p}
is the batch without p's prompt, its sum still divided by s — equivalently p's clipped logits replaced by
zeros (a constant, which softmax ignores; clip_c ∈ [−c, c], so z̄ moves by a vector in [−c/s, c/s]^V). Its
aggregate comes from the same clipped logits (no extra forward passes):

    z̄_{−p} = (Σ_q clip_c(z_q) − clip_c(z_p)) / s.

Dividing by s − 1 instead (the mean of the s − 1 remaining prompts, which an earlier version audited) moves z̄
by (z̄ − clip_c(z_p))/(s − 1), a vector spread over up to 4c/s, twice the 2c/s of the neighbour above: a
neighbour the accounting does not cover (per step up to 4× its zCDP RDP; measured 1.9× at s = 2 and 10).
`batch_size` (the fixed s) lets a run over the s − 1 remaining prompts (attacks/released_text.py's C0) keep
the denominator s.

The per-step data-dependent RDP at order α is (001 Eq. 7)

    ε^{(t)}(D; α) = max_p D_α^↔( softmax(z̄/τ) ‖ softmax(z̄_{−p}/τ) ),

measured here at every order of a grid (the RDP curve) and summed over the private tokens (Thm C.7);
`app.audit.accounting.rdp.rdp_curve_epsilon` converts the curve to (ε, δ).

Variant "svt" is the full algorithm of Amin et al. (their Alg. 1 with public predictions): a public prompt
(the instruction without a private example) gives public logits z_pub; the sparse vector test compares the
query d = ‖(1/s)Σ_p softmax(z_p) − softmax(z_pub)‖₁ (Amin et al. Eq. 2) plus Lap(2σ) noise with the
threshold θ + Lap(σ). Above it the token is private (sampled by Alg. 1 as above, budget spent, threshold
redrawn); below it the token is sampled from softmax(z_pub/τ_pub) and costs nothing beyond the SVT run.
Generation stops when r private tokens are spent. The data-dependent SVT cost of a run is its ε_SVT with the
query's sensitivity 1/s replaced by the measured max_p |d(D) − d(D∖{p})| over the run's queries (the
AboveThreshold proof only uses that difference for the pair D, D∖{p}), with the neighbour's sum also divided
by s, as above.

Clipping is invariant to a constant shift of z, so next-token log-probabilities may stand in for logits.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from app.audit.accounting.rdp import symmetric_renyi, symmetric_renyi_curve
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


def aggregate(clipped: np.ndarray, batch_size: int | None = None) -> np.ndarray:
    """ℓ(Z) = (1/s) Σ_p clip_c(z_p) over the batch axis 0 of (n, V) clipped logits; s = `batch_size`, by
    default n (the whole batch). A remove-one neighbour passes its n = s − 1 prompts with `batch_size` s."""
    clipped = np.asarray(clipped, dtype=np.float64)
    return clipped.sum(axis=0) / _batch_size(clipped.shape[0], batch_size)


def leave_one_out_aggregates(clipped: np.ndarray, batch_size: int | None = None) -> np.ndarray:
    """z̄_{−p} for every prompt p given: row p is the sum of the clipped logits of all prompts but p, divided
    by the batch size s = `batch_size` (default: the prompts given), the neighbour the accounting covers
    (module docstring), shape (n, V)."""
    clipped = np.asarray(clipped, dtype=np.float64)
    if clipped.shape[0] < 2 and batch_size is None:
        raise ValueError("a remove-one neighbour needs a batch of at least 2 prompts")
    return (clipped.sum(axis=0, keepdims=True) - clipped) / _batch_size(clipped.shape[0], batch_size)


def _batch_size(n_prompts: int, batch_size: int | None) -> int:
    """The denominator s: `batch_size`, which a batch of n prompts may fall short of by its removed ones."""
    if batch_size is None:
        return n_prompts
    if batch_size < n_prompts or batch_size < 1:
        raise ValueError(f"batch_size {batch_size} is below the {n_prompts} prompts it divides")
    return batch_size


@dataclass(frozen=True)
class StepDistributions:
    """One step: log softmax(z̄/τ) (shape (V,)) and the s neighbours log softmax(z̄_{−p}/τ) (shape (s, V))."""

    log_p: np.ndarray
    log_neighbours: np.ndarray


def step_distributions(
    clipped: np.ndarray, temperature: float, batch_size: int | None = None
) -> StepDistributions:
    """The sampling distribution of Alg. 1 and its remove-one neighbours (one per prompt given) from the same
    clipped logits, every aggregate divided by s = `batch_size` (default: the prompts given)."""
    return StepDistributions(
        log_p=log_softmax(aggregate(clipped, batch_size) / temperature),
        log_neighbours=log_softmax(leave_one_out_aggregates(clipped, batch_size) / temperature),
    )


def step_privacy_loss(dists: StepDistributions, alpha: float) -> float:
    """001 Eq. 7: max_p D_α^↔(A(D) ‖ A(D ∖ {p})) over the s neighbours of one step."""
    return max(float(symmetric_renyi(dists.log_p, q, alpha)) for q in dists.log_neighbours)


def step_privacy_curve(dists: StepDistributions, orders: Sequence[float]) -> np.ndarray:
    """001 Eq. 7 at every order: max_p D_α^↔(A(D) ‖ A(D ∖ {p})), shape (len(orders),)."""
    return symmetric_renyi_curve(dists.log_p, dists.log_neighbours, orders).max(axis=1)


def svt_distances(
    logprobs: np.ndarray, public_logprobs: np.ndarray, batch_size: int | None = None
) -> tuple[float, np.ndarray]:
    """Amin et al. Eq. 2 on D and on every D ∖ {p}: d = ‖(1/s)Σ_p P_p − P_pub‖₁ and the values with P_p left
    out of the sum (still divided by s, so |d(D) − d(D∖{p})| ≤ 1/s). s = `batch_size`, by default the rows of
    `logprobs` (a remove-one neighbour's s − 1 rows pass s)."""
    probs = np.exp(np.asarray(logprobs, dtype=np.float64))
    public = np.exp(np.asarray(public_logprobs, dtype=np.float64))
    s = _batch_size(probs.shape[0], batch_size)
    mean = probs.sum(axis=0) / s
    distance = float(np.abs(mean - public).sum())
    neighbours = np.abs(mean[None, :] - probs / s - public[None, :]).sum(axis=1)
    return distance, neighbours


class SparseVectorTest:
    """The sparse vector test of Amin et al. over one batch: AboveThreshold runs chained until r private tokens.

    `runs` holds, per run (finished by a private token, or still open), the measured sensitivity
    max_p |d(D) − d(D∖{p})| over its queries; each run's data-dependent RDP is α·2(Δ/σ)² (`rdp_curve`).
    """

    def __init__(
        self,
        *,
        threshold: float,
        noise: float,
        public_temperature: float,
        max_private_tokens: int,
        rng: np.random.Generator,
    ) -> None:
        self.threshold, self.noise = threshold, noise
        self.public_temperature = public_temperature
        self.max_private_tokens = max_private_tokens
        self.private_tokens = 0
        self.runs: list[float] = []
        self._open: float | None = None
        self._noisy_threshold = threshold + rng.laplace(scale=noise)

    @property
    def exhausted(self) -> bool:
        return self.private_tokens >= self.max_private_tokens

    def test(self, distance: float, neighbour_distances: np.ndarray, rng: np.random.Generator) -> bool:
        """One query: True (private token; the run ends, the threshold is redrawn) if d + Lap(2σ) ≥ θ̂."""
        sensitivity = float(np.max(np.abs(distance - np.asarray(neighbour_distances)), initial=0.0))
        self._open = max(self._open or 0.0, sensitivity)
        if distance + rng.laplace(scale=2 * self.noise) < self._noisy_threshold:
            return False
        self.runs.append(self._open)
        self._open = None
        self.private_tokens += 1
        self._noisy_threshold = self.threshold + rng.laplace(scale=self.noise)
        return True

    def all_runs(self) -> list[float]:
        """Sensitivities of the finished runs and of the open one (it has answered queries, so it costs)."""
        return [*self.runs, *([self._open] if self._open is not None else [])]

    def rdp_curve(self, orders: Sequence[float]) -> np.ndarray:
        """Data-dependent SVT RDP: Σ_runs α·2(Δ_run/σ)² (ε_SVT = 2Δ/σ per run as ½ε²-zCDP)."""
        total = sum(2 * (d / self.noise) ** 2 for d in self.all_runs())
        return np.asarray([a * total for a in orders], dtype=np.float64)


@dataclass(frozen=True)
class PrivateSequence:
    """One generated sequence: token ids, text, which tokens were private, and for each token the
    data-dependent RDP curve of its step (zeros for a public token; SVT costs are in `SparseVectorTest`)."""

    token_ids: tuple[int, ...]
    text: str
    private: tuple[bool, ...]
    step_curves: tuple[np.ndarray, ...]
    accounted_curves: tuple[np.ndarray, ...] = ()
    """The same steps' curves at the accounted (clip, τ), where a planted bug released at others."""


def generate_private_sequence(
    engine: LLMEngine,
    prompts: Sequence[str],
    *,
    clip: float,
    temperature: float,
    max_new_tokens: int,
    orders: Sequence[float],
    rng: np.random.Generator,
    stop_token_ids: frozenset[int] = frozenset(),
    on_token: Callable[[int], None] | None = None,
    public_prompt: str | None = None,
    svt: SparseVectorTest | None = None,
    prefix_ids: tuple[int, ...] = (),
    batch_size: int | None = None,
    released: tuple[float, float] | None = None,
) -> PrivateSequence:
    """Alg. 1 repeated for up to T_max tokens on the batch `prompts`, with the Eq. 7 curve of every step.

    Each step is one batched forward pass over the s prompts (and the public prompt with `svt`) continued by
    the tokens so far (`Prompt.continuation`); sampling stops early at a token in `stop_token_ids` (that step
    counts, its token is not part of the text) or when `svt` has spent its r private tokens.
    `on_token(t)` is called after step t (progress/cancel). `prefix_ids`: tokens the answer starts with (a
    start to continue, public); the text returned is what follows them. `batch_size`: the fixed denominator s
    of the aggregate and of the SVT query (default len(prompts)); a remove-one neighbour's run passes its
    s − 1 prompts and s (module docstring). Its `step_curves` measure the neighbours of the prompts given.
    `released`: the (clip, τ) the release really samples with when a planted bug differs from the accounted
    ones; `step_curves` are then what the release spent and `accounted_curves` what (clip, τ) allow on the
    same steps.
    """
    s = _batch_size(len(prompts), batch_size)
    if (svt is None) != (public_prompt is None):
        raise ValueError("the sparse vector test needs a public prompt, and a public prompt needs the test")
    generated: list[int] = []
    private: list[bool] = []
    curves: list[np.ndarray] = []
    accounted: list[np.ndarray] = []
    zero = np.zeros(len(orders))
    for t in range(max_new_tokens):
        if svt is not None and svt.exhausted:
            break
        texts = [*prompts, *([public_prompt] if public_prompt is not None else [])]
        dists = engine.next_token_logprobs(
            [Prompt(text=p, continuation=(*prefix_ids, *generated)) for p in texts], top_k="all"
        )
        logprobs = np.stack([d.logprobs for d in dists[: len(prompts)]])
        use_private = True
        if svt is not None:
            public = np.asarray(dists[-1].logprobs, dtype=np.float64)
            use_private = svt.test(*svt_distances(logprobs, public, s), rng)
        if use_private:
            step = step_distributions(clip_logits(logprobs, clip), temperature, s)
            accounted.append(step_privacy_curve(step, orders))
            if released is not None:
                step = step_distributions(clip_logits(logprobs, released[0]), released[1], s)
            curves.append(step_privacy_curve(step, orders) if released is not None else accounted[-1])
            token = int(rng.choice(step.log_p.shape[0], p=_probabilities(step.log_p)))
        else:
            assert svt is not None  # only the sparse vector test sends a token to the public side
            curves.append(zero)
            accounted.append(zero)
            log_pub = log_softmax(public / svt.public_temperature)
            token = int(rng.choice(log_pub.shape[0], p=_probabilities(log_pub)))
        private.append(use_private)
        if on_token is not None:
            on_token(t)
        if token in stop_token_ids:
            break
        generated.append(token)
    return PrivateSequence(
        tuple(generated), engine.decode(generated), tuple(private), tuple(curves), tuple(accounted)
    )


def _probabilities(log_p: np.ndarray) -> np.ndarray:
    p = np.exp(log_p)
    return p / p.sum()
