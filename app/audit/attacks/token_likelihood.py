"""The likelihood family on plain ICL (and the prompt defenses): per-token scores of a record's secret.

One collection serves every member. For each of the audit's (record, context) pairs — the same records,
contexts and prompts as the `likelihood` attack with the same seed (attacks/likelihood.py) — the engine
returns, at each token x_t of the secret after the deployed prompt P, log p_t = log p(x_t | P, x_<t) and
the moments of the model's next-token distribution there, μ_t = E_{z~p(·|P,x_<t)} log p(z) and
σ_t² = Var log p(z). A trial's score is then (higher = "the record is in the context"):

- `loss`: Σ_t log p_t (Yeom et al. 2018; the `likelihood` attack);
- `min_k`: the mean of the ⌈k·L⌉ smallest log p_t, k = 20 % (Shi et al. 2024, Min-K% Prob);
- `min_k_pp`: the mean of the ⌈k·L⌉ smallest (log p_t − μ_t)/σ_t (Zhang et al. 2025, Min-K%++);
- `zlib_ratio`: Σ_t log p_t / (zlib-compressed bytes of the secret) (Carlini et al. 2021);
- `recall`: LL(secret | N + P) / LL(secret | P), with N a fixed non-member record (the dataset's first
  test row, in no context) written before the query (Xie et al. 2024, ReCaLL: members lose more
  likelihood to a non-member prefix, so their ratio is larger);
- `lira_offline`: (s − μ_r)/σ with s the loss score, μ_r the mean loss of record r over its *reference*
  C0 contexts and σ the pooled spread of those reference scores around their records' means (Carlini et al.
  2022, offline LiRA with a fixed variance; the "shadow models" are fresh contexts without the record);
- `blind`: a function of the record's text alone, never of the model's output (Das, Zhang & Tramèr
  2024's blind baseline): −(zlib bytes)/(characters) of the secret.

Soundness. Each score is a function of its own trial's output and of data independent of it: the
non-member prefix is fixed, and `lira_offline` takes its reference from the first ⌊contexts/2⌋ pairs of
each record, which then are not trials (the trials are the other pairs, conditionally independent given
the reference), so the bounds of attacks/likelihood.py hold unchanged. `blind` scores a record the same
in C1 and C0: with every record on both sides equally often its TPR equals its FPR at every threshold —
the audit's paired design leaves no distribution shift for it to exploit; its row says so.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.audit.attacks.likelihood import LOGP_FLOOR, LikelihoodTrials, build_query
from app.audit.attacks.several_canaries import Cost, bounded_result, record_contexts
from app.audit.mechanisms.base import Mechanism
from app.audit.runtime import AuditError, RunContext
from app.audit.seeds import SeedTree
from app.engines.protocol import Prompt

MECHANISMS = frozenset({"none", "prompt_defense"})
SCORES = ("loss", "min_k", "min_k_pp", "zlib_ratio", "recall", "lira_offline", "blind")
K_FRACTION = 0.2
"""Min-K%'s k: Shi et al. 2024 report k = 20 % as their default."""


def check_request(request: Any) -> None:
    """Rules of every member (ValueError naming the field), called by the mia request's validator."""
    spec = request.attack
    if request.mechanism.name not in MECHANISMS:
        return  # the mia request names the mechanisms the attack audits
    if spec.secret not in ("continuation", "code"):
        raise ValueError(
            'attack.secret: the likelihood family scores a text secret ("continuation" or "code")'
        )
    if spec.threat_model != "white_box":
        raise ValueError(
            f"attack.threat_model: {spec.name} reads the model's token log-likelihoods (white box); "
            "set threat_model to white_box"
        )
    if spec.reference:
        raise ValueError(f"attack.reference: {spec.name} calibrates itself; leave reference false")
    if request.estimator == "exact":
        raise ValueError("estimator: the likelihood family draws its trials (use direct or bootstrap)")
    if spec.name == "lira_offline" and spec.contexts < 2:
        raise ValueError("attack.contexts: lira_offline needs ≥ 2 pairs per record (half are its reference)")


# ---------------------------------------------------------------------------------------------- scores
def min_k(logp: np.ndarray, k: float = K_FRACTION) -> float:
    """Mean of the ⌈k·L⌉ smallest token log-probabilities (Min-K% Prob)."""
    n = max(1, math.ceil(k * logp.size))
    return float(np.mean(np.sort(logp)[:n]))


def min_k_pp(logp: np.ndarray, mean: np.ndarray, std: np.ndarray, k: float = K_FRACTION) -> float:
    """Mean of the ⌈k·L⌉ smallest standardized log-probabilities (log p_t − μ_t)/σ_t (Min-K%++)."""
    return min_k((logp - mean) / np.maximum(std, 1e-12), k)


def zlib_bytes(text: str) -> int:
    """Length of the zlib-compressed UTF-8 text: Carlini et al. 2021's zlib entropy."""
    return len(zlib.compress(text.encode("utf-8")))


def zlib_ratio(loss: float, text: str) -> float:
    """Σ log p / zlib bytes: the log-likelihood per unit of the text's own compressibility."""
    return loss / zlib_bytes(text)


def recall(loss_prefixed: float, loss: float) -> float:
    """ReCaLL's LL(x | non-member prefix) / LL(x); both are log-likelihoods (≤ 0)."""
    return loss_prefixed / min(loss, -1e-12)


def blind(text: str) -> float:
    """A text-only score (it never sees the model): −zlib bytes per character of the secret."""
    return -zlib_bytes(text) / max(1, len(text))


def lira_offline(
    loss: np.ndarray, record: np.ndarray, reference: np.ndarray, ref_record: np.ndarray
) -> np.ndarray:
    """(s − μ_r)/σ per trial: μ_r the record's mean reference (C0) score, σ their pooled within-record
    spread (global spread when each record has one reference), floored at 1e-6."""
    records = np.unique(ref_record)
    means = {r: float(np.mean(reference[ref_record == r])) for r in records}
    centred = np.array([s - means[r] for s, r in zip(reference, ref_record, strict=True)])
    per_record = np.bincount(np.searchsorted(records, ref_record))
    sigma = float(np.sqrt(np.mean(centred**2))) if per_record.min() > 1 else float(np.std(reference))
    return np.array([(s - means[r]) / max(sigma, 1e-6) for s, r in zip(loss, record, strict=True)])


# ---------------------------------------------------------------------------------------------- trials
@dataclass(frozen=True)
class TokenStats:
    """Per token of the secret after one prompt: log p_t, μ_t and σ_t (module docstring)."""

    logp: np.ndarray
    mean: np.ndarray
    std: np.ndarray

    @property
    def loss(self) -> float:
        return float(max(np.sum(self.logp), LOGP_FLOOR))


def token_stats(llm: Any, prompts: list[Prompt], answer_ids: tuple[int, ...]) -> list[TokenStats]:
    """One engine call for all prompts: the next-token distribution after each prompt + answer[:t]
    (the prompt's KV cache is reused by every step)."""
    steps = [
        replace(p, continuation=p.continuation + answer_ids[:t])
        for p in prompts
        for t in range(len(answer_ids))
    ]
    dists = iter(llm.next_token_logprobs(steps, top_k="all"))
    out = []
    for _ in prompts:
        logp, mean, std = (np.empty(len(answer_ids)) for _ in range(3))
        for t, token in enumerate(answer_ids):
            lp = np.asarray(next(dists).logprobs, dtype=np.float64)
            p = np.exp(lp)
            finite = np.where(np.isfinite(lp), lp, 0.0)
            logp[t] = max(lp[token], LOGP_FLOOR)
            mean[t] = float(p @ finite)
            std[t] = math.sqrt(max(float(p @ finite**2) - mean[t] ** 2, 0.0))
        out.append(TokenStats(logp, mean, std))
    return out


@dataclass(frozen=True)
class FamilyTrials:
    """Every pair's token statistics, C1 and C0 (and, with `recall`, the loss after the non-member prefix)."""

    stats_in: list[TokenStats]
    stats_out: list[TokenStats]
    recall_in: np.ndarray | None
    recall_out: np.ndarray | None
    record: np.ndarray
    pair: np.ndarray
    records: list[dict]
    cost: Cost
    distinct_prompts: int


def draw_records(request: Any, ctx: RunContext, mechanism: Mechanism, seeds: SeedTree) -> tuple:
    """(dataset, train, canary indices, the other rows, exemplars per prompt), drawn exactly as the
    `likelihood` attack draws them (the same `contexts` stream, in the same order)."""
    if ctx.datasets is None:
        raise AuditError("a mia audit needs datasets in its run context")
    dataset = ctx.datasets.load(request.dataset)
    train = dataset.train
    n = mechanism.context_size(request.mechanism)
    if len(train) < request.attack.canaries + n:
        raise AuditError(
            f"dataset {dataset.name!r} has {len(train)} training rows; the attack needs "
            f"{request.attack.canaries + n} (attack.canaries + the context's exemplars)"
        )
    rng = seeds.rng("contexts")
    canaries = rng.choice(len(train), size=request.attack.canaries, replace=False)
    return dataset, train, canaries, np.setdiff1d(np.arange(len(train)), canaries), n, rng


def non_member(dataset: Any) -> str:
    """ReCaLL's fixed non-member prefix: the dataset's first test row (no context draws from the test split)."""
    if not dataset.test:
        raise AuditError(
            f"attack recall: dataset {dataset.name!r} has no test split to take a non-member from"
        )
    return dataset.test[0].text


def collect_family(
    request: Any, ctx: RunContext, mechanism: Mechanism, seeds: SeedTree, *, with_recall: bool
) -> FamilyTrials:
    """Token statistics of every pair (module docstring); progress "collect" per record."""
    if ctx.engines is None:
        raise AuditError("a mia audit needs engines in its run context")
    spec = request.attack
    dataset, train, canaries, others, n, rng_contexts = draw_records(request, ctx, mechanism, seeds)
    rng_parts = seeds.rng("partitions")
    llm = ctx.engines.llm(request.model or "oracle")
    if not hasattr(llm, "encode") or not hasattr(llm, "next_token_logprobs"):
        raise AuditError(f"attack {spec.name} needs an engine with a tokenizer and token distributions")
    prefix_text = non_member(dataset) if with_recall else ""
    passes0, tokens0 = llm.counters.forward_passes, llm.counters.prompt_tokens
    cost = Cost()
    stats_in, stats_out, rec_in, rec_out, record, pair, records = [], [], [], [], [], [], []
    for r, index in enumerate(canaries):
        ctx.progress("collect", 0.9 * r / len(canaries), f"record {r + 1} of {len(canaries)}")
        canary = train[int(index)]
        query = build_query(canary=canary, dataset=dataset, spec=spec)
        if query.prefill:
            query = replace(query, prefill_ids=tuple(llm.encode(query.prefill)))
        secret = query.answers[query.positive]
        answer_ids = tuple(llm.encode(secret))
        records.append({"record_id": f"train:{int(index)}", "text": canary.text, "secret": secret})
        prompts = []
        for c in range(spec.contexts):
            parts_in, parts_out = mechanism.partition(
                record_contexts(train, others, canary, n, rng_contexts), rng_parts
            )
            prompts += [*mechanism.audit_inputs(query, parts_in), *mechanism.audit_inputs(query, parts_out)]
            record.append(r)
            pair.append(c)
        cost.count(llm, prompts, [secret])
        stats = token_stats(llm, prompts, answer_ids)
        stats_in += stats[0::2]
        stats_out += stats[1::2]
        if with_recall:
            prefixed = [replace(p, text=f"{prefix_text}\n\n{p.text}") for p in prompts]
            cost.count(llm, prefixed, [secret])
            losses = source_losses(llm, prefixed, secret)
            rec_in += list(losses[0::2])
            rec_out += list(losses[1::2])
    cost.forward_passes = llm.counters.forward_passes - passes0
    cost.prompt_tokens = llm.counters.prompt_tokens - tokens0
    return FamilyTrials(
        stats_in=stats_in,
        stats_out=stats_out,
        recall_in=np.array(rec_in) if with_recall else None,
        recall_out=np.array(rec_out) if with_recall else None,
        record=np.array(record),
        pair=np.array(pair),
        records=records,
        cost=cost,
        distinct_prompts=2 * len(record) * (2 if with_recall else 1),
    )


def source_losses(llm: Any, prompts: list[Prompt], secret: str) -> np.ndarray:
    """log p(secret | prompt) per prompt, floored (one engine call)."""
    return np.maximum(np.asarray(llm.label_logprobs(prompts, [secret]), dtype=np.float64)[:, 0], LOGP_FLOOR)


def scored(family: FamilyTrials, score: str, contexts: int) -> LikelihoodTrials:
    """The trials of one member of the family: its score per C1 and C0 trial (module docstring)."""
    loss_in = np.array([s.loss for s in family.stats_in])
    loss_out = np.array([s.loss for s in family.stats_out])
    secrets = [family.records[r]["secret"] for r in family.record]
    keep = np.ones(family.record.size, dtype=bool)
    if score == "loss":
        s_in, s_out = loss_in, loss_out
    elif score == "min_k":
        s_in = np.array([min_k(s.logp) for s in family.stats_in])
        s_out = np.array([min_k(s.logp) for s in family.stats_out])
    elif score == "min_k_pp":
        s_in = np.array([min_k_pp(s.logp, s.mean, s.std) for s in family.stats_in])
        s_out = np.array([min_k_pp(s.logp, s.mean, s.std) for s in family.stats_out])
    elif score == "zlib_ratio":
        s_in = np.array([zlib_ratio(v, t) for v, t in zip(loss_in, secrets, strict=True)])
        s_out = np.array([zlib_ratio(v, t) for v, t in zip(loss_out, secrets, strict=True)])
    elif score == "recall":
        if family.recall_in is None or family.recall_out is None:
            raise AuditError("attack recall: the collection ran without the non-member prefix")
        s_in = np.array([recall(a, b) for a, b in zip(family.recall_in, loss_in, strict=True)])
        s_out = np.array([recall(a, b) for a, b in zip(family.recall_out, loss_out, strict=True)])
    elif score == "lira_offline":
        ref = family.pair < contexts // 2
        keep = ~ref
        s_in = lira_offline(loss_in[keep], family.record[keep], loss_out[ref], family.record[ref])
        s_out = lira_offline(loss_out[keep], family.record[keep], loss_out[ref], family.record[ref])
    elif score == "blind":
        s_in = s_out = np.array([blind(t) for t in secrets])
    else:
        raise AuditError(f"unknown likelihood-family score {score!r}; one of {', '.join(SCORES)}")
    return LikelihoodTrials(
        scores_in=np.asarray(s_in, dtype=float),
        scores_out=np.asarray(s_out, dtype=float),
        decisions_in=None,
        decisions_out=None,
        record=family.record[keep],
        records=family.records,
        cost=family.cost,
        distinct_prompts=family.distinct_prompts,
    )


def blind_trials(request: Any, ctx: RunContext, mechanism: Mechanism, seeds: SeedTree) -> LikelihoodTrials:
    """The blind baseline without the model: the same records, `contexts` trials per side each."""
    dataset, train, canaries, _, _, _ = draw_records(request, ctx, mechanism, seeds)
    records, scores, record = [], [], []
    for r, index in enumerate(canaries):
        query = build_query(canary=train[int(index)], dataset=dataset, spec=request.attack)
        secret = query.answers[query.positive]
        records.append({"record_id": f"train:{int(index)}", "text": train[int(index)].text, "secret": secret})
        scores += [blind(secret)] * request.attack.contexts
        record += [r] * request.attack.contexts
    s = np.array(scores, dtype=float)
    return LikelihoodTrials(s, s.copy(), None, None, np.array(record), records, Cost(), 0)


def run_scored(request: Any, ctx: RunContext, score: str, trials: LikelihoodTrials | None = None) -> dict:
    """One member's audit: trials (collected unless given) → both bounds → verdict + per-record table."""
    from app.audit.mechanisms.registry import build_mechanism

    seeds = SeedTree.from_seed(request.seed)
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    if trials is None:
        if score == "blind":
            trials = blind_trials(request, ctx, mechanism, seeds)
        else:
            family = collect_family(request, ctx, mechanism, seeds, with_recall=score == "recall")
            trials = scored(family, score, request.attack.contexts)
    result = bounded_result(request, ctx, mechanism, trials, seeds)
    result["likelihood"] = {
        "secret": request.attack.secret,
        "reference": False,
        "score": score,
        "canaries": request.attack.canaries,
        "contexts_per_canary": request.attack.contexts,
        "cost": trials.cost.as_dict(),
    }
    return result
