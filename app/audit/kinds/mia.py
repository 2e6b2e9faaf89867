"""Kind "mia": membership-inference audit of a DP-ICL mechanism on a canary (003 §3, Alg. 1; 002 Alg. 1).

Road: neighbouring contexts C1/C0 → the mechanism's partitions → the attack's query per partition →
n_llm clean statistics per context through the engine (forward passes = distinct prompts) → trials
(`bootstrap`: 003 Alg. 1 resampling through the mechanism's own release; `direct`: every trial a fresh
mechanism call, clean statistic included; `exact`: infinitely many trials in closed form, private voting
only, blind to release bugs) → the GDP lower bound per threat model → ε_emp beside the claimed ε.

Run it from a file: `python -m app.audit.kinds.mia examples/mia-oracle-eps1.json` (= app.audit.local).
"""

from __future__ import annotations

from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.audit.attacks.registry import ATTACKS, attack_module
from app.audit.contexts import build_contexts
from app.audit.kinds.base import AuditRequestBase
from app.audit.mechanisms.base import CleanSource, Mechanism
from app.audit.mechanisms.bugs import BUGS
from app.audit.mechanisms.http_endpoint import HttpEndpoint
from app.audit.mechanisms.registry import MECHANISMS, build_mechanism
from app.audit.prompts import CONTEXTLEAK_CANARY
from app.audit.runtime import AuditError, RunContext

THREAT_MODELS = ("black_box", "white_box")
_MEMORY_FLOATS = 4_000_000  # clean-statistic floats per chunk (~32 MB per array)


class EndpointSpec(BaseModel):
    """`http_endpoint`: where the deployed DP-ICL system listens and how to talk to it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", description="The system's URL; each call is one POST.")
    body: dict[str, Any] = Field(
        default_factory=lambda: {"context": "{context}", "query": "{query}"},
        description='JSON body template: "{context}" alone = list of exemplars; {context}/{query} in text.',
    )
    answer_path: str = Field(default="answer", min_length=1, description="JSON path to the answer text.")
    headers: dict[str, str] = Field(default_factory=dict, description="Extra HTTP headers (e.g. auth).")
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    retries: int = Field(default=2, ge=0, le=10, description="Retries on connection errors, 429, 5xx.")


class MechanismSpec(BaseModel):
    """The DP-ICL mechanism under audit and its parameters."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="private_voting", description=f"One of: {', '.join(MECHANISMS)}.")
    partitions: int = Field(default=4, ge=1, le=512, description="T, the number of disjoint partitions.")
    shots_per_partition: int = Field(default=2, ge=1, le=64, description="Exemplars per partition.")
    partitioning: Literal["disjoint", "disjoint_poisson"] = "disjoint"
    temperature: float = Field(default=1.0, ge=0, le=10, description="The mechanism's sampling temperature.")
    candidates: int = Field(default=8, ge=1, le=256, description="ESA: zero-shot candidates.")
    max_new_tokens: int = Field(default=32, ge=1, le=512, description="ESA: length of each generation.")
    calibration: Literal["classic", "analytic"] = "classic"
    sensitivity: float | None = Field(
        default=None, gt=0, description="L2 sensitivity; default √2 (votes) or 2/T (ESA, 003 Lemma A.1)."
    )
    bug: str | None = Field(default=None, description=f"A planted bug: {', '.join(BUGS)}.")
    defense_level: int = Field(default=1, ge=1, le=3, description="prompt_defense: 002 B.1 level.")
    max_words: int = Field(
        default=4,
        ge=1,
        le=64,
        description="KSA: distinct keywords kept per partition output (Δ₂ = √(2·max_words)).",
    )
    keywords: int = Field(default=1, ge=1, le=256, description="KSA: keywords released (top noisy counts).")
    endpoint: EndpointSpec | None = Field(default=None, description="http_endpoint: the deployed system.")

    @field_validator("name")
    @classmethod
    def _known_mechanism(cls, v: str) -> str:
        if v not in MECHANISMS:
            raise ValueError(f"unknown mechanism {v!r}; choose one of {', '.join(MECHANISMS)}")
        return v

    @field_validator("bug")
    @classmethod
    def _known_bug(cls, v: str | None) -> str | None:
        if v is not None and v not in BUGS:
            raise ValueError(f"unknown bug {v!r}; choose one of {', '.join(BUGS)}")
        return v


class AttackSpec(BaseModel):
    """The membership-inference attack and the threat models to evaluate."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="inquiry", description=f"One of: {', '.join(ATTACKS)}.")
    threat_model: Literal["black_box", "white_box", "both"] = "both"
    canary: str | None = Field(
        default=None,
        min_length=1,
        description="A canary text; default a training exemplar (canary_prompt: 'The sun rises in the west.').",
    )
    signal_texts: tuple[str, str] | None = Field(
        default=None,
        description="signal_text, reference_vector, output_only: (y1, y0); ksa_rare_word: (rare, common).",
    )
    variant: Literal["binary", "list"] = Field(
        default="binary", description='canary_prompt: "1"/"0" or list.'
    )

    @field_validator("name")
    @classmethod
    def _known_attack(cls, v: str) -> str:
        if v not in ATTACKS:
            raise ValueError(f"unknown attack {v!r}; choose one of {', '.join(ATTACKS)}")
        return v


class Request(AuditRequestBase):
    kind: Literal["mia"] = "mia"
    mechanism: MechanismSpec = Field(default_factory=MechanismSpec)
    epsilon: float = Field(default=1.0, gt=0, description="The claimed ε (ignored by none/prompt_defense).")
    delta: float = Field(default=1e-5, gt=0, lt=1, description="The claimed δ.")
    attack: AttackSpec = Field(default_factory=AttackSpec)
    llm_calls: int = Field(default=200, ge=1, description="n_llm clean statistics per context (003 Alg. 1).")
    trials: int = Field(default=400_000, ge=2, description="Membership trials per context.")
    estimator: Literal["bootstrap", "exact", "direct"] = "bootstrap"
    confidence: float = Field(default=0.95, gt=0, lt=1)
    threshold_strategy: Literal["split", "in_sample", "bonferroni"] = "split"
    utility_queries: int = Field(default=0, ge=0, le=1000, description="Held-out queries for utility.")

    @model_validator(mode="after")
    def _consistent(self) -> Request:
        if not self.dataset:
            raise ValueError("dataset: a mia audit needs a dataset (the exemplar pool)")
        module = attack_module(self.attack.name)
        if self.mechanism.name not in module.MECHANISMS:
            raise ValueError(
                f"attack.name: {self.attack.name} cannot audit mechanism {self.mechanism.name!r} "
                f"(it audits {', '.join(sorted(module.MECHANISMS))})"
            )
        if self.mechanism.name == "http_endpoint":
            if self.mechanism.endpoint is None:
                raise ValueError(
                    "mechanism.endpoint: http_endpoint needs an endpoint (url, body, answer_path)"
                )
            if self.attack.threat_model != "black_box":
                raise ValueError(
                    "attack.threat_model: a deployed endpoint is audited black-box only (it releases answers, "
                    "not noisy votes); set threat_model to black_box"
                )
            if self.estimator != "direct":
                raise ValueError(
                    "estimator: an endpoint has no clean statistic to resample; every trial is a real call, "
                    "so use direct (trials = calls per context)"
                )
        elif self.mechanism.endpoint is not None:
            raise ValueError("mechanism.endpoint: only the http_endpoint mechanism takes an endpoint")
        if self.estimator == "exact" and self.mechanism.name != "private_voting":
            raise ValueError("estimator: exact exists for private_voting only")
        if self.estimator == "exact" and self.mechanism.bug:
            raise ValueError(
                "estimator: exact assumes the documented noise and cannot see a planted bug; use bootstrap"
            )
        return self


EXAMPLE: dict = {
    "kind": "mia",
    "dataset": "ag_news",
    "model": "oracle",
    "seed": 0,
    "mechanism": {
        "name": "private_voting",
        "partitions": 4,
        "shots_per_partition": 2,
        "calibration": "analytic",
    },
    "epsilon": 1.0,
    "delta": 1e-5,
    "attack": {"name": "inquiry", "threat_model": "both"},
    "llm_calls": 200,
    "trials": 400_000,
    "estimator": "bootstrap",
}


def _threat_models(request: Request) -> tuple[str, ...]:
    return THREAT_MODELS if request.attack.threat_model == "both" else (request.attack.threat_model,)


def _bound_dict(bound, theory_epsilon: float | None) -> dict:
    """The issue's per-threat-model fields (+ `*_unbounded` flags and the counts behind them)."""
    full = bound.as_dict()
    keep = ("tpr", "fpr", "mu_lower", "epsilon_empirical", "epsilon_point", "threshold", "auc", "accuracy")
    out = {k: full[k] for k in keep}
    out.update({k: v for k, v in full.items() if k.endswith("_unbounded")})
    out["threshold_strategy"] = bound.threshold_strategy
    out["counts"] = {
        "tp": bound.counts.tp,
        "fn": bound.counts.fn,
        "fp": bound.counts.fp,
        "tn": bound.counts.tn,
    }
    out["violation"] = theory_epsilon is not None and bound.epsilon_empirical > theory_epsilon
    return out


def _direct_trials(mechanism, prompts_in, prompts_out, answers, source, release, n_trials, rngs, report):
    """`direct`: every trial is a fresh mechanism call — new clean statistic from the engine's (cached)
    answer distributions, then the release — in chunks, no resampling."""
    from app.audit.simulate import TrialScores

    width = 1
    decisions = {"in": np.empty(n_trials, dtype=bool), "out": np.empty(n_trials, dtype=bool)}
    scores = {"in": np.empty(n_trials), "out": np.empty(n_trials)}
    done = 0
    while done < n_trials:
        size = min(mechanism.call_batch or max(1000, _MEMORY_FLOATS // width), n_trials - done)
        for side, prompts, rng in (("in", prompts_in, rngs[0]), ("out", prompts_out, rngs[1])):
            clean = mechanism.collect(prompts, answers, source, size, rng)
            width = max(1, int(np.prod(clean.shape[1:])))
            decisions[side][done : done + size], scores[side][done : done + size] = release(clean, rng)
        done += size
        report(done / n_trials)
    return TrialScores(decisions["in"], decisions["out"], scores["in"], scores["out"])


def run(request: Request, ctx: RunContext) -> dict:
    """The membership audit; see the module docstring. Progress: collect C1, collect C0, simulate, bound."""
    from app.audit.simulate import bootstrap_trials
    from app.audit.thresholds import bound_from_scores, strategy_from_name

    if ctx.datasets is None or ctx.engines is None:
        raise AuditError("a mia audit needs datasets and engines in its run context")
    streams = np.random.SeedSequence(request.seed).spawn(6)
    rng_ctx, rng_part, rng_in, rng_out, rng_attack, rng_util = (np.random.default_rng(s) for s in streams)

    dataset = ctx.datasets.load(request.dataset)
    mechanism: Mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    spec = request.mechanism
    canary_text = request.attack.canary
    if canary_text is None and request.attack.name == "canary_prompt":
        canary_text = CONTEXTLEAK_CANARY
    n_exemplars = 1 if spec.name in ("none", "prompt_defense") else spec.partitions
    contexts = build_contexts(dataset, n_exemplars * spec.shots_per_partition, rng_ctx, canary_text)
    query = attack_module(request.attack.name).build_query(
        canary=contexts.canary, dataset=dataset, spec=request.attack, rng=rng_attack
    )
    parts_in, parts_out = mechanism.partition(contexts, rng_part)
    prompts_in = mechanism.audit_inputs(query, parts_in)
    prompts_out = mechanism.audit_inputs(query, parts_out)

    llm = ctx.engines.llm(request.model or "oracle") if mechanism.needs_llm else None
    embedder = ctx.engines.embedder() if mechanism.needs_embedder else None
    passes_before = llm.counters.forward_passes if llm is not None else 0
    source = CleanSource(llm, embedder, seed=request.seed)
    mechanism.prepare(query, source)
    target = mechanism.binary_target(query, source)

    def release(batch: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        return mechanism.binary_view(mechanism.release(batch, rng), target)

    theory = mechanism.theory
    result: dict = {"estimator": request.estimator}
    bounds: dict[str, dict] = {}
    if request.estimator == "exact":
        from app.audit.exact import exact_vote_audit

        ctx.progress("collect C1", 0.0, "label distributions with the canary")
        probs_in = mechanism.label_probs(prompts_in, query.answers, source)
        ctx.progress("collect C0", 0.3, "label distributions without the canary")
        probs_out = mechanism.label_probs(prompts_out, query.answers, source)
        ctx.progress("bound", 0.6, "exact audit")
        other = query.negative if query.negative is not None else 1 - query.positive
        exact = exact_vote_audit(
            probs_in, probs_out, sigma=mechanism.std, target=query.positive, other=other, delta=request.delta
        )
        for tm in _threat_models(request):
            mu = exact.mu_black_box if tm == "black_box" else exact.mu_white_box
            eps = exact.epsilon_black_box if tm == "black_box" else exact.epsilon_white_box
            bounds[tm] = {
                "mu_lower": mu,
                "epsilon_empirical": eps,
                "violation": theory is not None and eps > theory.epsilon + 1e-9,
            }
            if tm == "black_box":
                bounds[tm].update(tpr=exact.tpr_black_box, fpr=exact.fpr_black_box)
            else:
                bounds[tm]["threshold"] = exact.best_threshold
    else:

        def report(fraction: float) -> None:
            ctx.progress("simulate", 0.2 + 0.75 * fraction, f"{fraction:.0%} of the trials")

        if request.estimator == "bootstrap":
            n_clean = request.llm_calls
            ctx.progress("collect C1", 0.0, f"{n_clean} clean statistics with the canary")
            clean_in = mechanism.collect(prompts_in, query.answers, source, n_clean, rng_in)
            ctx.progress("collect C0", 0.1, f"{n_clean} clean statistics without the canary")
            clean_out = mechanism.collect(prompts_out, query.answers, source, n_clean, rng_out)
            ctx.progress("simulate", 0.2, f"{request.trials} trials per context")
            width = max(1, int(np.prod(clean_in.shape[1:])))
            trials = bootstrap_trials(
                clean_in,
                clean_out,
                release,
                n_trials=request.trials,
                seed=request.seed,
                chunk_size=int(np.clip(_MEMORY_FLOATS // width, 1000, 50_000)),
                progress=report,
            )
        else:  # direct: each trial collects its own clean statistic (C1 and C0 alike)
            ctx.progress("simulate", 0.0, f"{request.trials} mechanism calls per context")
            trials = _direct_trials(
                mechanism,
                prompts_in,
                prompts_out,
                query.answers,
                source,
                release,
                request.trials,
                (rng_in, rng_out),
                report,
            )
        ctx.progress("bound", 0.95, "GDP lower bound")
        strategy = strategy_from_name(request.threshold_strategy, seed=request.seed)
        claimed = theory.epsilon if theory else None
        for tm in _threat_models(request):
            if tm == "black_box":
                s_in, s_out = trials.decisions_in.astype(float), trials.decisions_out.astype(float)
            else:
                s_in, s_out = trials.scores_in, trials.scores_out
            bound = bound_from_scores(
                s_in, s_out, strategy=strategy, confidence=request.confidence, delta=request.delta
            )
            bounds[tm] = _bound_dict(bound, claimed)
    result.update(bounds)

    if theory is not None:
        result.update(theory.as_dict())
    else:
        result.update(epsilon_theory=None, mu_theory=None, epsilon_ceiling=None)
    result["violation"] = any(b["violation"] for b in bounds.values())
    result["llm_forward_passes"] = llm.counters.forward_passes - passes_before if llm is not None else None
    if isinstance(mechanism, HttpEndpoint):
        result["endpoint_calls"] = mechanism.calls
    result["distinct_prompts"] = source.distinct_prompts
    result["llm_calls"] = request.llm_calls
    result["trials"] = request.trials if request.estimator != "exact" else None
    result["canary"] = contexts.canary.text
    result["mechanism"] = {"name": spec.name, "partitions": len(parts_in), "bug": spec.bug}
    result["utility"] = None
    if request.utility_queries:
        from app.audit.utility import utility

        result["utility"] = utility(mechanism, dataset, parts_out, source, request.utility_queries, rng_util)
    if ctx.on_counters is not None and llm is not None:
        ctx.on_counters(llm.counters.as_dict())
    ctx.progress("bound", 1.0, "done")
    return result


if __name__ == "__main__":
    from app.audit.local import main

    raise SystemExit(main())
