"""Membership audits on GENERATED text over several canaries: the repeat attack and the ContextLeak
secret query (`attack.score` set; attacks/repeat.py, attacks/canary_prompt.py build the queries).

Per record (a training row of the dataset), the query holds what the auditor knows of it — the first
half of its words (repeat) or the text before its secret number (canary_prompt, variant "secret") —
and the assistant's answer is prefilled with that text (`AuditQuery.prefill`, for engines with a
tokenizer), so the model continues the record. The mechanism releases text:

- `none` / `prompt_defense`: the model's continuation of the one prompt holding the whole context;
- `esa`: the zero-shot candidate nearest the noisy mean embedding ẽ (003 App. 5 Alg. 3);
- `ksa`: the released keywords (top noisy counts over the public vocabulary W, which holds the words of
  the zero-shot candidates and of the attack's answers, the secret among them);
- `synthetic_generation`: one DP synthetic text per call (001 App. C.1 Alg. 1 over s one-shot prompts,
  mechanisms/synthetic_generation.py) continuing the prefill; C0 is C1 without the record's prompt, its
  sums still divided by the batch size s (remove-one at a fixed denominator, the neighbour its accounting
  covers: app/audit/icl/synthetic.py), black box only. With `mechanism.svt`, Amin et al.'s full
  algorithm: the public prompt (instruction and the record's label, the same in C1 and C0) and the sparse
  vector test decide which tokens are private.

Black-box score s = overlap(released text, secret) (app/audit/icl/overlap.py: ROUGE-L F1 or exact match),
a function of the release only. White box (ESA, KSA only): ESA −‖ẽ − emb(secret)‖ (003 Prompt 5's
distance), KSA the mean noisy count of the secret's keywords in W.

Trials and soundness are those of the likelihood attack (attacks/likelihood.py): `canaries` records,
`contexts` neighbouring pairs each (C0 = exemplars drawn from the other rows, C1 = C0 with one
uniformly placed exemplar replaced by the record), a C1 and a C0 trial per mechanism call. With the
mechanism's `temperature` 0 the partitions' outputs are a function of the pair, so each of the
`llm_calls` calls of a DP mechanism is a fresh noise draw on the same clean statistic (a fresh call of
the deployed mechanism, which decodes greedily); with temperature > 0 every call samples fresh outputs.
Conditionally on the drawn (record, context) pairs the trials are independent, the counts
Poisson-binomial (Hoeffding 1956, Thm 4: Clopper-Pearson stays valid) and the uniform mixture over
the pairs is as private as the mechanism (joint convexity of the hockey-stick divergence).

Cost: the engine's forward passes and prompt tokens beside the from-scratch count (every requested
generation its own run: one pass per generated token plus the end-of-sequence step, the whole prompt
fed once); the difference is the memo of identical prompts (C0 shares C1's non-canary partitions),
the engine's result cache, batching and, in the transformers engine, the prefix KV store (`generate`
prefills each distinct prompt once, feeding only the tokens past its longest cached prefix).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.audit.attacks.base import AuditQuery, BuildQuery
from app.audit.attacks.several_canaries import Cost, bounded_result, record_contexts
from app.audit.icl.overlap import SCORES
from app.audit.icl.synthetic import generate_private_sequence
from app.audit.icl.templates import generation_prompt, public_generation_prompt
from app.audit.mechanisms.base import CleanSource, Mechanism
from app.audit.mechanisms.esa import ESA
from app.audit.mechanisms.ksa import KSA, keywords
from app.audit.mechanisms.plain import PlainICL
from app.audit.mechanisms.registry import build_mechanism
from app.audit.mechanisms.synthetic_generation import SyntheticGeneration
from app.audit.runtime import AuditError, NoSolution, RunContext
from app.audit.seeds import SeedTree
from app.engines.protocol import Prompt

MECHANISMS = frozenset({"none", "prompt_defense", "esa", "ksa", "synthetic_generation"})
EXAMPLES_KEPT = 4  # released texts kept in the result (records 1…4, their first context pair)


def check_generated(request: Any) -> None:
    """Request-level rules of a generated-text audit (ValueError naming the field)."""
    name = request.mechanism.name
    if name not in MECHANISMS:
        raise ValueError(
            f"attack.score: generated-text audits cover {', '.join(sorted(MECHANISMS))}, not {name}"
        )
    if request.estimator != "direct":
        raise ValueError(
            "estimator: a generated-text audit draws every trial as a mechanism call; use direct"
        )
    if name in ("none", "prompt_defense") and request.attack.threat_model != "black_box":
        raise ValueError(
            f"attack.threat_model: {name} releases text only; set black_box (its white-box view is the "
            "likelihood attack)"
        )
    if request.attack.canary is not None:
        raise ValueError("attack.canary: a generated-text audit draws its records from the dataset")
    if name == "synthetic_generation":
        if request.mechanism.shots_per_partition != 1:
            raise ValueError(
                "mechanism.shots_per_partition: synthetic_generation uses one-shot prompts; set 1"
            )
        if request.mechanism.partitions < 2:
            raise ValueError(
                "mechanism.partitions: synthetic_generation needs a batch of s ≥ 2 one-shot prompts"
            )
        try:
            build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
        except (ValueError, AuditError) as exc:
            knobs = "clip/batch/length" + (
                "/svt.noise/svt.max_private_tokens" if request.mechanism.svt else ""
            )
            raise NoSolution(f"epsilon: no temperature reaches the claim with this {knobs} ({exc})") from None


class CountingSource(CleanSource):
    """CleanSource that also counts what every requested generation would cost from scratch."""

    def __init__(self, llm: Any, embedder: Any = None, seed: int = 0, cost: Cost | None = None) -> None:
        super().__init__(llm, embedder, seed=seed)
        self.cost = cost if cost is not None else Cost()

    def generations(
        self, prompts: Sequence[Prompt], n: int, temperature: float, max_new_tokens: int
    ) -> list[list[str]]:
        out = super().generations(prompts, n, temperature, max_new_tokens)
        format_ids, encode = getattr(self.llm, "format_ids", None), getattr(self.llm, "encode", None)
        if format_ids is not None and encode is not None:
            for prompt, texts in zip(prompts, out, strict=True):
                self.cost.scratch_tokens += n * len(format_ids(prompt))
                self.cost.scratch_forward_passes += sum(
                    min(len(encode(t)) + 1, max_new_tokens) for t in texts
                )
        return out


@dataclass(frozen=True)
class GeneratedTrials:
    """Per-trial outputs (as LikelihoodTrials): `decisions_*` the black-box overlap score."""

    scores_in: np.ndarray
    scores_out: np.ndarray
    decisions_in: np.ndarray
    decisions_out: np.ndarray
    record: np.ndarray
    records: list[dict]
    cost: Cost
    distinct_prompts: int
    examples: list[dict]
    # synthetic_generation: (decoding steps, private ones) over all released texts
    steps: tuple[int, int] | None = None


def _with_prefill(query: AuditQuery, llm: Any) -> AuditQuery:
    encode = getattr(llm, "encode", None)
    if not query.prefill or encode is None:
        return query
    return replace(query, prefill_ids=tuple(encode(query.prefill)))


def _released(mechanism: Mechanism, answer: np.ndarray) -> list[str]:
    """The released texts of a batch: ESA's candidates, KSA's keywords joined by spaces."""
    if isinstance(mechanism, ESA):
        return [mechanism.candidate_texts[int(a)] for a in answer]
    vocabulary = mechanism.vocabulary  # type: ignore[attr-defined]
    return [" ".join(vocabulary[int(i)] for i in row) for row in answer]


class _Scorer:
    """overlap(text, secret), memoized by text (a DP release repeats few distinct texts)."""

    def __init__(self, name: str, secret: str) -> None:
        self.score, self.secret = SCORES[name], secret
        self.memo: dict[str, float] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        for t in texts:
            if t not in self.memo:
                self.memo[t] = self.score(t, self.secret)
        return np.array([self.memo[t] for t in texts], dtype=float)


def _dp_side(
    mechanism: Mechanism, query: AuditQuery, prompts: list, source: CleanSource, calls: int,
    pool: np.random.Generator, noise: np.random.Generator, target: Any, secret_words: list[int],
    scorer: _Scorer,
) -> tuple[np.ndarray, np.ndarray, list[str]]:  # fmt: skip
    """`calls` releases of ESA/KSA on one side: (overlap, white-box score, released texts)."""
    greedy = mechanism.temperature == 0  # type: ignore[attr-defined]
    clean = mechanism.collect(prompts, query.answers, source, 1 if greedy else calls, pool)
    if greedy:
        clean = np.repeat(clean, calls, axis=0)
    release = mechanism.release(clean, noise)
    texts = _released(mechanism, release.answer)
    if isinstance(mechanism, ESA):
        white = mechanism.binary_view(release, target)[1]
    else:
        white = release.white_box[:, secret_words].mean(axis=1) if secret_words else np.zeros(calls)
    return scorer(texts), white, texts


def _synthetic_side(
    mechanism: SyntheticGeneration, llm: Any, texts: list[str], public: str, prefix_ids: tuple[int, ...],
    calls: int, rng: np.random.Generator, scorer: _Scorer, batch_size: int,
) -> tuple[np.ndarray, list[str], np.ndarray]:  # fmt: skip
    """`calls` released synthetic texts from the one-shot prompts `texts` (Alg. 1, fresh sampling each; with
    the sparse vector test, `public` is the public prompt): scores, texts, (steps, private steps). Sums are
    divided by `batch_size` s, also on C0's s − 1 prompts (the neighbour the accounting covers)."""
    stop = frozenset(getattr(llm, "eos_token_ids", ()) or ())
    released, steps = [], np.zeros(2, dtype=np.int64)
    for _ in range(calls):
        svt = mechanism.sparse_vector_test(rng)
        sequence = generate_private_sequence(
            llm, texts, clip=mechanism.clip, temperature=mechanism.temperature,
            max_new_tokens=mechanism.max_new_tokens, orders=(float(mechanism.alpha),), rng=rng,
            stop_token_ids=stop, prefix_ids=prefix_ids,
            public_prompt=public if svt is not None else None, svt=svt, batch_size=batch_size,
        )  # fmt: skip
        steps += (len(sequence.private), sum(sequence.private))
        released.append(sequence.text)
    return scorer(released), released, steps


def collect(
    request: Any, ctx: RunContext, mechanism: Mechanism, seeds: SeedTree, build_query: BuildQuery
) -> GeneratedTrials:
    """All trials of the audit (module docstring); progress "collect" per record."""
    spec = request.attack
    if ctx.datasets is None or ctx.engines is None:
        raise AuditError("a mia audit needs datasets and engines in its run context")
    dataset = ctx.datasets.load(request.dataset)
    train = dataset.train
    n_exemplars = mechanism.context_size(request.mechanism)
    if len(train) < spec.canaries + n_exemplars:
        raise AuditError(
            f"dataset {dataset.name!r} has {len(train)} training rows; the audit needs "
            f"{spec.canaries + n_exemplars} (attack.canaries + the context's exemplars)"
        )
    rng_contexts, rng_parts = seeds.rng("contexts"), seeds.rng("partitions")
    pool_in, pool_out = seeds.rng("pool"), seeds.rng("pool")  # same state: common random numbers
    noise_in, noise_out = seeds.rng("noise_in"), seeds.rng("noise_out")
    canaries = rng_contexts.choice(len(train), size=spec.canaries, replace=False)
    others = np.setdiff1d(np.arange(len(train)), canaries)
    llm = ctx.engines.llm(request.model or "oracle")
    embedder = ctx.engines.embedder() if mechanism.needs_embedder else None
    cost = Cost()
    source = CountingSource(llm, embedder, seed=seeds.integer("generations"), cost=cost)
    passes0, tokens0 = llm.counters.forward_passes, llm.counters.prompt_tokens
    plain = isinstance(mechanism, PlainICL)
    generator = mechanism if isinstance(mechanism, SyntheticGeneration) else None
    synthetic = generator is not None
    temperature = mechanism.temperature  # type: ignore[attr-defined]
    calls = 1 if plain and temperature == 0 else request.llm_calls
    if synthetic and not callable(getattr(llm, "encode", None)):
        raise AuditError(
            f"synthetic_generation needs a language model with a tokenizer; {request.model!r} has none"
        )
    max_new = request.mechanism.max_new_tokens
    out: dict[str, list] = {k: [] for k in ("d_in", "d_out", "s_in", "s_out", "record")}
    records, examples = [], []
    steps = np.zeros(2, dtype=np.int64)
    for r, index in enumerate(canaries):
        ctx.progress("collect", 0.9 * r / len(canaries), f"record {r + 1} of {len(canaries)}")
        canary = train[int(index)]
        query = build_query(canary=canary, dataset=dataset, spec=spec, rng=seeds.rng("attack"))
        query = _with_prefill(query, llm)
        secret = query.answers[query.positive]
        scorer = _Scorer(spec.score, secret)
        records.append({"record_id": f"train:{int(index)}", "text": canary.text, "secret": secret})
        target, secret_words = None, []
        if not plain and not synthetic:
            mechanism.prepare(query, source)
            target = mechanism.binary_target(query, source) if isinstance(mechanism, ESA) else None
            if isinstance(mechanism, KSA):
                at = {w: i for i, w in enumerate(mechanism.vocabulary)}
                secret_words = [at[w] for w in keywords(secret) if w in at]
        for c in range(spec.contexts):
            pair = record_contexts(train, others, canary, n_exemplars, rng_contexts)
            if generator is not None:  # remove-one: C0 = C1 without the record's one-shot prompt, still ÷ s
                # str(label): as the prompt's f-string shows it (a generation dataset is labelled)
                batch = [generation_prompt(e.text, str(e.label)) for e in pair.with_canary]
                without = batch[: pair.canary_position] + batch[pair.canary_position + 1 :]
                prefix_ids = tuple(query.prefill_ids or ())
                public = public_generation_prompt(
                    str(canary.label)
                )  # the same in C1 and C0: no private example
                d_in, t_in, n_in = _synthetic_side(
                    generator, llm, batch, public, prefix_ids, calls, noise_in, scorer, len(batch)
                )
                d_out, t_out, n_out = _synthetic_side(
                    generator, llm, without, public, prefix_ids, calls, noise_out, scorer, len(batch)
                )
                steps += n_in + n_out
                for key, value in (("d_in", d_in), ("d_out", d_out), ("s_in", d_in), ("s_out", d_out)):
                    out[key].append(value)
                out["record"].append(np.full(len(d_in), r))
                if c == 0 and r < EXAMPLES_KEPT:
                    examples.append({"secret": secret, "released_in": t_in[0], "released_out": t_out[0]})
                continue
            parts_in, parts_out = mechanism.partition(pair, rng_parts)
            p_in = mechanism.audit_inputs(query, parts_in)
            p_out = mechanism.audit_inputs(query, parts_out)
            if plain:
                gen_in, gen_out = source.generations([*p_in, *p_out], calls, temperature, max_new)
                d_in, d_out = scorer(gen_in), scorer(gen_out)
                s_in, s_out, t_in, t_out = d_in, d_out, gen_in, gen_out
            else:
                d_in, s_in, t_in = _dp_side(
                    mechanism, query, p_in, source, calls, pool_in, noise_in, target, secret_words, scorer
                )
                d_out, s_out, t_out = _dp_side(
                    mechanism, query, p_out, source, calls, pool_out, noise_out, target, secret_words, scorer
                )
            for key, value in (("d_in", d_in), ("d_out", d_out), ("s_in", s_in), ("s_out", s_out)):
                out[key].append(value)
            out["record"].append(np.full(len(d_in), r))
            if c == 0 and r < EXAMPLES_KEPT:
                examples.append({"secret": secret, "released_in": t_in[0], "released_out": t_out[0]})
    cost.forward_passes = llm.counters.forward_passes - passes0
    cost.prompt_tokens = llm.counters.prompt_tokens - tokens0
    return GeneratedTrials(
        scores_in=np.concatenate(out["s_in"]).astype(float),
        scores_out=np.concatenate(out["s_out"]).astype(float),
        decisions_in=np.concatenate(out["d_in"]).astype(float),
        decisions_out=np.concatenate(out["d_out"]).astype(float),
        record=np.concatenate(out["record"]),
        records=records,
        cost=cost,
        distinct_prompts=source.distinct_prompts,
        examples=examples,
        steps=(int(steps[0]), int(steps[1])) if synthetic else None,
    )


def run_generated(
    request: Any, ctx: RunContext, build_query: BuildQuery, trials: GeneratedTrials | None = None
) -> dict:
    """The generated-text audit: trials (`collect`, unless given) → bounds, verdict, per-record table."""
    seeds = SeedTree.from_seed(request.seed)
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    if trials is None:
        trials = collect(request, ctx, mechanism, seeds, build_query)
    result = bounded_result(request, ctx, mechanism, trials, seeds)
    result.update(mechanism.result_extras())
    if trials.steps is not None:
        result["synthetic_generation"].update(steps=trials.steps[0], private_steps=trials.steps[1])
    result["generated"] = {
        "attack": request.attack.name,
        "score": request.attack.score,
        "canaries": request.attack.canaries,
        "contexts_per_canary": request.attack.contexts,
        "calls_per_context": int(
            trials.scores_in.size // max(1, request.attack.canaries * request.attack.contexts)
        ),
        "examples": trials.examples,
        "cost": trials.cost.as_dict(),
    }
    return result
