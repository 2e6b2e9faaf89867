"""Likelihood attack (attack name `likelihood`): the ICL analogue of a loss-based membership attack.

The auditor holds a record (the canary) and asks how likely the model finds its secret field given the
deployed prompt: score = log p(secret | prompt(C)) (Yeom et al. 2018's loss attack, with the context in
place of the training set; Wen et al. 2024 §4 for ICL). `secret`:

- `continuation`: the record's second half of words, after 003 Prompt 5 ("complete the following
  sentence: {first half}"), scored as the assistant's answer — plain ICL and the system-prompt defenses;
- `code`: the record's secret number, after the ContextLeak secret query (attacks/canary_prompt.py,
  variant "secret": context in the system prompt, the assistant's answer prefilled with the text before
  the number) — the white-box twin of that generated-text attack;
- `label`: the record's label, after 003 Prompt 4 (classify the record's own text) — also under private
  voting, whose release is scored instead: white box Ṽ_secret − max_{k≠secret} Ṽ_k, black box
  "the released label is the secret".

`reference: true` is the zero-shot reference: the score minus the same score without any context,
log p(secret | prompt(∅)) (for votes: T·p_∅(secret) − max_{k≠secret} T·p_∅(k), the votes expected from
zero-shot partitions), which removes how predictable the record is anyway. One
subtracted number per record, not LiRA: the per-record reference calibration in the LiRA-offline style is
the `lira_offline` attack (attacks/token_likelihood.py).

Trials (one audit, several canaries). A likelihood is a fixed number given the context, so the trial's
randomness is the record and its context: `canaries` training records are drawn once; for each, `contexts`
fresh neighbouring pairs (C0 = exemplars drawn from the other training rows, C1 = C0 with a uniformly
placed exemplar replaced by the canary) and their partitions; a pair gives one C1 and one C0 trial
(deterministic score) or, under private voting, `llm_calls` fresh mechanism calls per side (votes drawn
from the partitions' label scores as its teachers give them, `mechanism.teacher_output`, with common random
numbers, then the release noise). The C1
trials' law is the mixture over (record, context) of M(C1) and the C0 trials' the same mixture of M(C0),
with each pair neighbouring: by joint convexity of the hockey-stick divergence the pair of mixtures is as
private as the mechanism, so a bound on them bounds the mechanism. The trials are stratified (every
record the same number of times), so each count is Poisson-binomial, whose tails beyond the mean are no
heavier than the binomial's with the same mean (Hoeffding 1956, Thm 4): Clopper-Pearson stays valid.

Cost: every (record, context) sends its C1 and C0 prompts in one engine call, C1 first, so C0 reuses C1's
KV cache up to the canary's position (transformers engine, app/engines/prefix_kv.py) and a multi-token
secret feeds only its own tokens; `cost` reports the engine's forward passes and fed tokens beside the
from-scratch count (every scored sequence its own pass over all its tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.attacks.several_canaries import Cost, bounded_result, record_contexts, split_canary
from app.audit.icl.prompts import MISLABEL, REPEAT, REPEAT_NOT_FOUND
from app.audit.mechanisms.base import BinaryTarget, CleanSource, Mechanism, draw_votes
from app.audit.mechanisms.plain import PlainICL
from app.audit.runtime import AuditError, RunContext
from app.audit.seeds import SeedTree
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"none", "prompt_defense", "private_voting"})
SECRETS = ("continuation", "label", "code")
LOGP_FLOOR = -1e4
"""Log-likelihoods are clipped here: a secret of probability 0 (an exact-search engine) scores −10⁴."""


def check_request(request: Any) -> None:
    """Request-level rules (ValueError naming the field), called by the mia request's validator."""
    spec, mechanism = request.attack, request.mechanism.name
    if mechanism not in MECHANISMS:
        return  # the mia request names the mechanisms this attack audits
    if spec.secret != "label" and mechanism == "private_voting":
        raise ValueError('attack.secret: private voting votes over the dataset\'s labels; use "label"')
    if mechanism != "private_voting" and spec.threat_model != "white_box":
        raise ValueError(
            f"attack.threat_model: the likelihood attack on {mechanism} reads the model's log-likelihood "
            "(white box); set threat_model to white_box"
        )
    if request.estimator == "exact":
        raise ValueError("estimator: the likelihood attack draws its trials (use direct or bootstrap)")


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator | None = None
) -> AuditQuery:
    """The query for one record; `answers[positive]` is its secret."""
    if getattr(spec, "secret", "continuation") == "code":
        from app.audit.attacks.canary_prompt import secret_query

        return secret_query(canary)
    if getattr(spec, "secret", "continuation") == "label":
        labels = tuple(dataset.labels)
        if dataset.task != "classification" or not labels or canary.label not in labels:
            raise AuditError('attack.secret "label" needs a classification dataset whose records have labels')
        fields = {"labels": ", ".join(labels), "canary": canary.text}
        return AuditQuery(MISLABEL, labels, positive=labels.index(canary.label), negative=None, fields=fields)
    prefix, rest = split_canary(canary.text)
    answers = (rest, REPEAT_NOT_FOUND)  # the second only lets an exact-search engine (oracle) answer
    return AuditQuery(REPEAT, answers, positive=0, negative=None, fields={"prefix": prefix})


@dataclass(frozen=True)
class LikelihoodTrials:
    """Per-trial outputs; trial t of C1 and trial t of C0 come from the same (record, context, call)."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    decisions_in: np.ndarray | None
    decisions_out: np.ndarray | None
    record: np.ndarray  # index into `records` per trial
    records: list[dict]  # {"record_id", "text", "secret"}
    cost: Cost
    distinct_prompts: int


def collect(request: Any, ctx: RunContext, mechanism: Mechanism, seeds: SeedTree) -> LikelihoodTrials:
    """All trials of the audit (see the module docstring); progress: "collect" per record."""
    spec = request.attack
    if ctx.datasets is None or ctx.engines is None:
        raise AuditError("a mia audit needs datasets and engines in its run context")
    dataset = ctx.datasets.load(request.dataset)
    train = dataset.train
    n_exemplars = mechanism.context_size(request.mechanism)
    if len(train) < spec.canaries + n_exemplars:
        raise AuditError(
            f"dataset {dataset.name!r} has {len(train)} training rows; the likelihood attack needs "
            f"{spec.canaries + n_exemplars} (attack.canaries + the context's exemplars)"
        )
    rng_contexts, rng_parts = seeds.rng("contexts"), seeds.rng("partitions")
    pool_in, pool_out = seeds.rng("pool"), seeds.rng("pool")  # same state: common random numbers
    noise_in, noise_out = seeds.rng("noise_in"), seeds.rng("noise_out")
    canaries = rng_contexts.choice(len(train), size=spec.canaries, replace=False)
    others = np.setdiff1d(np.arange(len(train)), canaries)
    llm = ctx.engines.llm(request.model or "oracle")
    source = CleanSource(llm, None, seed=seeds.integer("generations"))
    passes0, tokens0 = llm.counters.forward_passes, llm.counters.prompt_tokens
    voting = not isinstance(mechanism, PlainICL)
    calls = request.llm_calls if voting else 1
    cost = Cost()
    out: dict[str, list] = {"s_in": [], "s_out": [], "d_in": [], "d_out": [], "record": []}
    records = []
    for r, index in enumerate(canaries):
        ctx.progress("collect", 0.9 * r / len(canaries), f"record {r + 1} of {len(canaries)}")
        canary = train[int(index)]
        query = build_query(canary=canary, dataset=dataset, spec=spec)
        if query.prefill and hasattr(llm, "encode"):  # the secret is scored after the prefilled handle
            query = replace(query, prefill_ids=tuple(llm.encode(query.prefill)))
        secret = query.positive
        records.append(
            {"record_id": f"train:{int(index)}", "text": canary.text, "secret": query.answers[secret]}
        )
        pairs = []
        for _ in range(spec.contexts):
            parts_in, parts_out = mechanism.partition(
                record_contexts(train, others, canary, n_exemplars, rng_contexts), rng_parts
            )
            pairs.append((mechanism.audit_inputs(query, parts_in), mechanism.audit_inputs(query, parts_out)))
        reference = mechanism.audit_inputs(query, [()]) if spec.reference else []
        prompts = [p for p_in, p_out in pairs for p in (*p_in, *p_out)] + reference
        cost.count(llm, prompts, query.answers)
        logprobs = source.label_logprobs(prompts, query.answers)  # one call: C0 reuses C1's prefix
        logprobs = np.maximum(logprobs, LOGP_FLOOR)
        rows = iter(logprobs)
        for p_in, p_out in pairs:
            lp_in = np.stack([next(rows) for _ in p_in])
            lp_out = np.stack([next(rows) for _ in p_out])
            if not voting:
                out["s_in"].append(lp_in[:, secret])
                out["s_out"].append(lp_out[:, secret])
                continue
            target = BinaryTarget(positive=secret, negative=None)
            for side, lp, pool, noise in (
                ("in", lp_in, pool_in, noise_in),
                ("out", lp_out, pool_out, noise_out),
            ):
                votes = draw_votes(mechanism.votes_from_scores(lp), calls, pool)  # type: ignore[attr-defined]
                decision, score = mechanism.binary_view(mechanism.release(votes, noise), target)
                out[f"s_{side}"].append(score)
                out[f"d_{side}"].append(decision)
        shift = 0.0
        if spec.reference:
            ref = next(rows)
            if voting:
                expected = len(pairs[0][0]) * mechanism.votes_from_scores(ref[None, :])[0]  # type: ignore[attr-defined]
                shift = float(expected[secret] - np.max(np.delete(expected, secret)))
            else:
                shift = float(ref[secret])
        n_new = spec.contexts * calls
        for key in ("s_in", "s_out"):
            out[key][-spec.contexts :] = [s - shift for s in out[key][-spec.contexts :]]
        out["record"].append(np.full(n_new, r))
    cost.forward_passes = llm.counters.forward_passes - passes0
    cost.prompt_tokens = llm.counters.prompt_tokens - tokens0
    return LikelihoodTrials(
        scores_in=np.concatenate(out["s_in"]).astype(float),
        scores_out=np.concatenate(out["s_out"]).astype(float),
        decisions_in=np.concatenate(out["d_in"]) if voting else None,
        decisions_out=np.concatenate(out["d_out"]) if voting else None,
        record=np.concatenate(out["record"]),
        records=records,
        cost=cost,
        distinct_prompts=source.distinct_prompts,
    )


def run_audit(request: Any, ctx: RunContext, trials: LikelihoodTrials | None = None) -> dict:
    """The likelihood audit: trials (`collect`, unless given: a report that also plots them) → both
    bounds per threat model → verdict, + the per-record table (app/audit/stats/records.py)."""
    from app.audit.mechanisms.registry import build_mechanism

    seeds = SeedTree.from_seed(request.seed)
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    if trials is None:
        trials = collect(request, ctx, mechanism, seeds)
    result = bounded_result(request, ctx, mechanism, trials, seeds)
    result["likelihood"] = {
        "secret": request.attack.secret,
        "reference": request.attack.reference,
        "canaries": request.attack.canaries,
        "contexts_per_canary": request.attack.contexts,
        "cost": trials.cost.as_dict(),
    }
    return result
