"""Kind "mia": membership-inference audit of a DP-ICL mechanism on a canary (003 §3, Alg. 1; 002 Alg. 1).

Road: neighbouring contexts C1/C0 → the mechanism's partitions → the attack's query per partition →
n_llm clean statistics per context through the engine (forward passes = distinct prompts) → trials
(`bootstrap`: 003 Alg. 1 resampling through the mechanism's own release; `direct`: every trial a fresh
mechanism call, clean statistic included; `exact`: infinitely many trials in closed form, private voting
only, blind to release bugs) → both lower bounds per threat model (GDP and assumption-free) → the verdict.

Soundness (docs/results/soundness.md): every random choice takes its own stream of one seed tree
(app/audit/seeds.py); C1 and C0 pools share the non-canary partitions' outputs (common random numbers),
so Clopper-Pearson on the trials covers the pool's sampling error too; `violation` is the OR of the
threat models' tests, each at the Bonferroni share of the stated confidence; it compares the GDP bound
with the claim only for a known Gaussian mechanism (`Mechanism.gaussian`), the assumption-free bound
otherwise or when the request says `"assumption": "none"`. A classic calibration whose exact ε at δ
exceeds the claim is reported apart (`calibration_valid`, `theory_violation`).

Run it from a file: `python -m app.audit.kinds.mia examples/mia-oracle-eps1.json` (= app.audit.standalone).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator
from pydantic_core import PydanticCustomError

from app.audit.accounting import MAX_EPSILON, MIN_DELTA, MIN_EPSILON
from app.audit.attacks.base import AuditQuery
from app.audit.attacks.count_score import retired
from app.audit.attacks.registry import ATTACKS, attack_module, default_canary
from app.audit.budget import BudgetExhausted, BudgetSpec, Meter, MeteredEngine, stopped, with_budget
from app.audit.icl.contexts import NeighbouringContexts, build_contexts
from app.audit.kinds.base import (
    PUBLIC_TEMPERATURE,
    SVT_NOISE,
    SVT_THRESHOLD,
    AuditRequestBase,
    PublicTemperature,
    SvtNoise,
    SvtThreshold,
)
from app.audit.kinds.mia_schema import add_rules
from app.audit.mechanisms.base import BinaryTarget, CleanSource, Mechanism
from app.audit.mechanisms.bugs import BUGS
from app.audit.mechanisms.http_endpoint import ChatTargetSpec, HeaderValue, StepSpec, TargetEngines
from app.audit.mechanisms.private_voting import PrivateVoting
from app.audit.mechanisms.registry import MECHANISMS, build_mechanism, check_bug
from app.audit.results.mia import MiaAuditResult
from app.audit.runtime import AuditError, NoSolution, RunContext
from app.audit.seeds import SeedTree
from app.audit.stats.auditor import THREAT_MODELS, Auditor
from app.schemas.errors import NO_SOLUTION


class EndpointSpec(BaseModel):
    """`http_endpoint`: where the deployed DP-ICL system listens and how to talk to it."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", description="The system's URL; each call is one POST.")
    body: dict[str, Any] = Field(
        default_factory=lambda: {"context": "{context}", "query": "{query}"},
        description='JSON body template: "{context}" alone = list of exemplars; {context}/{query} in text.',
    )
    answer_path: str = Field(default="answer", min_length=1, description="JSON path to the answer text.")
    headers: dict[str, HeaderValue] = Field(
        default_factory=dict,
        description='Extra HTTP headers; a credential goes by reference: {"secret": "NAME"} (app/secrets.py).',
    )
    timeout_s: float = Field(default=10.0, gt=0, le=300)
    retries: int = Field(
        default=2,
        ge=0,
        le=10,
        description="Retries on connection errors and 5xx. A 429 stretch is waited out (Retry-After "
        "honoured) for as long as budget.max_seconds allows, or 300 s without one.",
    )
    steps: list[StepSpec] = Field(
        default_factory=list,
        max_length=8,
        description="A multi-step target: requests sent before each call (e.g. create a session), whose "
        "saved values ({session_id}) later templates use; cookies are kept per trial.",
    )
    close: StepSpec | None = Field(
        default=None,
        description="A request sent after each call, whatever happened (e.g. close the session).",
    )
    rate: float | None = Field(
        default=None,
        gt=0,
        le=1000,
        description="Most calls per second the audit sends (halved after a 429 or 503, won back additively "
        "as calls are answered); Retry-After is honoured.",
    )
    max_concurrency: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Most calls in flight at once (halved after a 429 or 503, won back additively: AIMD). "
        "Only the wall time changes: answers are kept by trial, so the result is the one calls made one at "
        "a time would give ({trial} in a template makes a seeded target answer each trial alike).",
    )


class SvtSpec(BaseModel):
    """`synthetic_generation` with Amin et al.'s public logits and sparse vector test (app/audit/icl/synthetic.py):
    only tokens whose private and public predictions differ by more than the noisy threshold spend budget."""

    model_config = ConfigDict(extra="forbid")

    threshold: SvtThreshold = SVT_THRESHOLD
    noise: SvtNoise = SVT_NOISE
    public_temperature: PublicTemperature = PUBLIC_TEMPERATURE
    max_private_tokens: int | None = Field(
        default=None,
        ge=1,
        le=512,
        description="r, private tokens per released text (default mechanism.max_new_tokens); τ is solved for r.",
    )


class MechanismSpec(BaseModel):
    """The DP-ICL mechanism under audit and its parameters."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description=f"Required (no default): one of {', '.join(MECHANISMS)}.")
    partitions: int = Field(default=4, ge=1, le=512, description="T, the number of disjoint partitions.")
    shots_per_partition: int = Field(default=2, ge=1, le=64, description="Exemplars per partition.")
    partitioning: Literal["disjoint", "disjoint_poisson"] = "disjoint"
    temperature: float = Field(default=1.0, ge=0, le=10, description="The mechanism's sampling temperature.")
    teacher_output: Literal["free_text", "label_logprobs"] = Field(
        default="free_text",
        description="private_voting: how each teacher (partition) gives its label. free_text: it generates an "
        "answer at the mechanism temperature, parsed to a label (the longest label it starts with, else no "
        "vote), as a chat deployment does; label_logprobs: the deployment reads the label from the label "
        "tokens' log-probabilities, their argmax at temperature 0 (a softmax draw above), as many DP-ICL "
        "classification deployments do, so every teacher votes. The audit and the utility query both use it.",
    )
    candidates: int = Field(default=8, ge=1, le=256, description="ESA: zero-shot candidates.")
    max_new_tokens: int = Field(default=32, ge=1, le=512, description="ESA: length of each generation.")
    calibration: Literal["classic", "analytic"] = "classic"
    sensitivity: float | None = Field(
        default=None, gt=0, description="L2 sensitivity; default √2 (votes) or 2/T (ESA, 003 Lemma A.1)."
    )
    bug: str | None = Field(default=None, description=f"A planted bug: {', '.join(BUGS)}.")
    bug_factor: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="bug noise_scale: the release's noise standard deviation is bug_factor × the calibrated σ "
        "(0.5: the mechanism leaks as if σ were halved); absent, 1 (no change); ignored without that bug.",
    )
    defense_level: int = Field(default=1, ge=1, le=3, description="prompt_defense: 002 B.1 level.")
    max_words: int = Field(
        default=4,
        ge=1,
        le=64,
        description="KSA: distinct keywords kept per partition output (Δ₂ = √(2·max_words)).",
    )
    keywords: int = Field(default=1, ge=1, le=256, description="KSA: keywords released (top noisy counts).")
    clip: float = Field(
        default=10.0, gt=0, le=100, description="synthetic_generation: c, logit clipping level."
    )
    svt: SvtSpec | None = Field(
        default=None,
        description="synthetic_generation: run Amin et al.'s full algorithm (public logits, sparse vector test) "
        "instead of the simplified one (every token private).",
    )
    endpoint: EndpointSpec | None = Field(default=None, description="http_endpoint: the deployed system.")

    @field_validator("name")
    @classmethod
    def _known_mechanism(cls, v: str) -> str:
        if v not in MECHANISMS:
            raise ValueError(f"unknown mechanism {v!r}; choose one of {', '.join(MECHANISMS)}")
        return v

    @field_validator("svt")
    @classmethod
    def _svt_for_synthetic_generation(cls, v: SvtSpec | None, info: ValidationInfo) -> SvtSpec | None:
        if v is not None and info.data.get("name") != "synthetic_generation":
            raise ValueError("the sparse vector test applies to mechanism synthetic_generation only")
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
    variant: Literal["binary", "list", "secret"] = Field(
        default="binary",
        description='canary_prompt: "1"/"0", list, or "secret" (ask for the record\'s secret number; needs score).',
    )
    score: Literal["rouge_l", "exact"] | None = Field(
        default=None,
        description="repeat, canary_prompt: score the GENERATED text against the record's secret by ROUGE-L F1 "
        "or exact match, over `canaries` records × `contexts` pairs (attacks/released_text.py).",
    )
    secret: Literal["continuation", "label", "code"] = Field(
        default="continuation",
        description="likelihood: the record's field scored — its second half of words, its label or its "
        "secret number (code, asked for by the ContextLeak secret query).",
    )
    reference: bool = Field(
        default=False,
        description="likelihood: subtract the same score without any context (a zero-shot reference; the per-record, LiRA-offline-style calibration is attack lira_offline).",
    )
    canaries: int = Field(
        default=20,
        ge=1,
        le=2000,
        description="likelihood, generated text: records audited (per-record table).",
    )
    contexts: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="likelihood, generated text: neighbouring context pairs per record.",
    )

    @field_validator("name")
    @classmethod
    def _known_attack(cls, v: str) -> str:
        if (refusal := retired(v)) is not None:
            raise ValueError(refusal)
        if v not in ATTACKS:
            raise ValueError(f"unknown attack {v!r}; choose one of {', '.join(ATTACKS)}")
        return v


class Request(AuditRequestBase):
    model_config = ConfigDict(json_schema_extra=add_rules)  # its rules across fields (mia_schema.py)

    kind: Literal["mia"] = "mia"
    mechanism: MechanismSpec = Field(
        description="The system under audit, required: its `name` picks the mechanism (no default, so a "
        "request never audits classic private voting by accident)."
    )
    epsilon: float | None = Field(
        default=1.0,
        ge=MIN_EPSILON,
        le=MAX_EPSILON,
        description="The claimed ε (null or absent: 1). A mechanism that claims none (none, prompt_defense) "
        "stores no ε: null, whatever the request says.",
    )
    delta: float = Field(default=1e-5, ge=MIN_DELTA, lt=1, description="The claimed δ.")
    attack: AttackSpec = Field(default_factory=AttackSpec)
    llm_calls: int = Field(default=200, ge=1, description="n_llm clean statistics per context (003 Alg. 1).")
    trials: int = Field(default=400_000, ge=2, description="Membership trials per context.")
    estimator: Literal["bootstrap", "exact", "direct"] = "bootstrap"
    confidence: float = Field(
        default=0.95,
        ge=0.5,
        lt=1,
        description="Confidence of the verdict, in [0.5, 1); split over the threat models' tests (Bonferroni).",
    )
    threshold_strategy: Literal["split", "in_sample", "bonferroni"] = "split"
    assumption: Literal["auto", "gdp", "none"] = Field(
        default="auto",
        description='Which lower bound the verdict uses: "gdp" (valid for known Gaussian mechanisms), '
        '"none" (assumption-free, valid for any mechanism), "auto" = gdp for private_voting/esa/ksa, '
        "none otherwise (http_endpoint).",
    )
    utility_queries: int = Field(default=0, ge=0, le=1000, description="Held-out queries for utility.")
    target: ChatTargetSpec | None = Field(
        default=None,
        description="A deployed chat-completions app audited as the model (instead of `model`): the records in "
        "the system message, the attack's query as the user's; grey-box attacks read its top_logprobs.",
    )
    budget: BudgetSpec | None = Field(
        default=None,
        description="Caps on calls, tokens and seconds (app/audit/budget.py). Stopped by one, the audit is "
        "judged on the C1/C0 trial pairs it finished (inconclusive: budget, unless they show a violation); "
        "stopped before a trial on each side, it fails naming the cap.",
    )
    max_epsilon: float = Field(
        default=0.0,
        ge=0,
        le=MAX_EPSILON,
        description="For a system that claims nothing (mechanism none, prompt_defense): the leakage allowed "
        "before the verdict is `leak` (0: any leakage shown at the stated confidence). Ignored under a claim.",
    )

    @model_validator(mode="before")
    @classmethod
    def _mechanism_named(cls, data: Any) -> Any:
        """A request must name its mechanism: its absence is a 422 at that field listing the choices."""
        if isinstance(data, dict):
            given = data.get("mechanism")
            if given is None:
                raise ValueError(
                    f"mechanism: required; name the system under audit, e.g. "
                    f'{{"name": "private_voting"}}; one of {", ".join(MECHANISMS)}'
                )
            if isinstance(given, dict) and given.get("name") is None:
                raise ValueError(f"mechanism.name: required; one of {', '.join(MECHANISMS)}")
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Request:
        if not self.dataset:
            raise ValueError("dataset: a mia audit needs a dataset (the exemplar pool)")
        mechanism = MECHANISMS[self.mechanism.name]
        if not mechanism.claims:
            self.epsilon = None  # leakage only: no claim is stored, shown or judged against
        elif self.epsilon is None:
            self.epsilon = 1.0  # null on a mechanism that claims: the default claim, as if left out
        module = attack_module(self.attack.name)
        if hasattr(module, "check_request"):  # an attack's own rules (e.g. likelihood)
            try:
                module.check_request(self)
            except NoSolution as exc:  # arithmetic no schema states (mia_schema.py): the 422 names it
                raise PydanticCustomError(NO_SOLUTION, "{error}", {"error": str(exc)}) from None
        if self.mechanism.name not in module.MECHANISMS:
            raise ValueError(
                f"attack.name: {self.attack.name} cannot audit mechanism {self.mechanism.name!r} "
                f"(it audits {', '.join(sorted(module.MECHANISMS))})"
            )
        if self.mechanism.teacher_output not in mechanism.teacher_outputs:
            raise ValueError(
                f"mechanism.teacher_output: {mechanism.name} has no teachers that vote a label; "
                f'"{self.mechanism.teacher_output}" applies to private_voting only (leave it "free_text")'
            )
        if self.target is not None and (self.model is not None or not mechanism.needs_llm):
            raise ValueError(
                "target: a chat-completions target is the model: leave model unset, and audit a mechanism that "
                "asks a model (none, prompt_defense, private_voting, …)"
            )
        if self.mechanism.name == "http_endpoint" and self.mechanism.endpoint is None:
            raise ValueError("mechanism.endpoint: http_endpoint needs an endpoint (url, body, answer_path)")
        if self.mechanism.name != "http_endpoint" and self.mechanism.endpoint is not None:
            raise ValueError("mechanism.endpoint: only the http_endpoint mechanism takes an endpoint")
        if not mechanism.white_box_available and self.attack.threat_model != "black_box":
            raise ValueError(
                f"attack.threat_model: {mechanism.name} is audited black-box only (it releases answers, "
                "not noisy votes); set threat_model to black_box"
            )
        if self.estimator not in mechanism.estimators:
            why = mechanism.estimators_note or (
                f"{mechanism.name} supports {', '.join(sorted(mechanism.estimators))}"
            )
            raise ValueError(f"estimator: {self.estimator} is not available: {why}")
        try:
            check_bug(self.mechanism.bug, mechanism)
        except AuditError as e:
            raise ValueError(str(e)) from None
        if self.estimator == "exact" and self.mechanism.bug:
            raise ValueError(
                "estimator: exact assumes the documented noise and cannot see a planted bug; use bootstrap"
            )
        if self.assumption == "gdp" and not mechanism.gaussian:
            raise ValueError(
                f"assumption: {mechanism.name} is not a known Gaussian mechanism, so the GDP conversion "
                'may overstate ε; use "auto" or "none"'
            )
        return self


# Attacks that read a record's text only (its membership, continuation, code or secret), never its label:
# the ones an unlabelled dataset can serve (each run on an unlabelled copy of synthetic_records).
TEXT_ATTACKS = frozenset(
    {
        "inquiry",
        "canary_prompt",
        "signal_text",
        "reference_vector",
        "ksa_rare_word",
        "repeat",
        "likelihood",
        "blind",
        "lira_offline",
        "min_k",
        "min_k_pp",
        "recall",
        "zlib_ratio",
    }
    | {"inquiry_count", "signal_text_count"}  # the Ṽ_y+ score reads what its design reads (count_score.py)
)
LABEL_MECHANISMS = frozenset({"synthetic_generation"})  # prompts carry each exemplar's own label


def label_field(request: Request) -> str | None:
    """The field that makes this audit read the records' labels (its JSON path), or None when it reads
    none, so that an unlabelled dataset can serve it."""
    if request.mechanism.name in LABEL_MECHANISMS:
        return "$.mechanism.name"
    if request.attack.name not in TEXT_ATTACKS:
        return "$.attack.name"
    if request.attack.secret == "label":
        return "$.attack.secret"
    return None


EXAMPLE: dict = {
    "kind": "mia",
    "dataset": "dbpedia14",
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


@dataclass
class Setup:
    """One audit's fixed ingredients: contexts, the mechanism, the attack's query and prompts, the source."""

    request: Request
    seeds: SeedTree
    mechanism: Mechanism
    contexts: NeighbouringContexts
    query: AuditQuery
    parts_in: list
    parts_out: list
    prompts_in: list
    prompts_out: list
    source: CleanSource
    target: BinaryTarget
    llm: Any
    dataset: Any
    meter: Meter
    search: dict | None = None  # `auto`'s canary search (app/audit/design.py), when it ran

    def release(self, batch: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """One batch of private releases → (black-box decision, white-box score)."""
        return self.mechanism.binary_view(self.mechanism.release(batch, rng), self.target)


def _setup(request: Request, ctx: RunContext, measured: bool = False) -> Setup:
    if ctx.datasets is None or ctx.engines is None:
        raise AuditError("a mia audit needs datasets and engines in its run context")
    seeds = SeedTree.from_seed(request.seed)
    assert request.dataset is not None  # the request's validator requires one
    dataset = ctx.datasets.load(request.dataset)
    if measured:  # after `auto` selection: only the records its pilot did not see (app/audit/design.py)
        from app.audit.design import measurement_records

        dataset = measurement_records(dataset)
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    mechanism.egress = ctx.egress  # where an http_endpoint may call (the service's allow-list)
    mechanism.secrets = ctx.secrets  # its headers' secret references (app/secrets.py)
    mechanism.responses = ctx.responses  # its answered calls, kept for a resume (app/db/responses.py)
    canary_text = request.attack.canary or default_canary(request.attack.name)
    contexts = build_contexts(
        dataset, mechanism.context_size(request.mechanism), seeds.rng("contexts"), canary_text
    )
    attack = attack_module(request.attack.name)
    if hasattr(attack, "plant"):  # a canary design that writes its own canary exemplar (copy, rare token)
        contexts = attack.plant(contexts, dataset, request.attack, seeds.rng("attack"))
    query = attack.build_query(
        canary=contexts.canary, dataset=dataset, spec=request.attack, rng=seeds.rng("attack")
    )
    parts_in, parts_out = mechanism.partition(contexts, seeds.rng("partitions"))
    given = ctx.extra.get("meter")  # the one `run` counts the whole audit with
    meter = given if isinstance(given, Meter) else Meter(request.budget)
    mechanism.meter = meter  # an endpoint's calls are checked and charged per call
    llm = ctx.engines.llm(request.model or "oracle") if mechanism.needs_llm else None
    if llm is not None and request.budget is not None:
        llm = MeteredEngine(llm, meter)
    embedder = ctx.engines.embedder() if mechanism.needs_embedder else None
    source = CleanSource(llm, embedder, seed=seeds.integer("generations"))
    search = None
    if measured:  # `auto` picks the pair among canary records and labels (app/audit/design.py)
        from app.audit.design import search_canary, searches

        if searches(request):
            contexts, parts_in, query, search = search_canary(
                request=request,
                module=attack,
                mechanism=mechanism,
                dataset=dataset,
                contexts=contexts,
                parts_in=parts_in,
                parts_out=parts_out,
                source=source,
                rng=seeds.rng("attack"),
            )
    mechanism.prepare(query, source)
    return Setup(
        request=request,
        seeds=seeds,
        mechanism=mechanism,
        contexts=contexts,
        query=query,
        parts_in=parts_in,
        parts_out=parts_out,
        prompts_in=mechanism.audit_inputs(query, parts_in),
        prompts_out=mechanism.audit_inputs(query, parts_out),
        source=source,
        target=mechanism.binary_target(query, source),
        llm=llm,
        dataset=dataset,
        meter=meter,
        search=search,
    )


def _design_mus(setup: Setup, threat_models: tuple[str, ...]) -> dict[str, float]:
    """Each threat model's exact population μ against private voting *as designed* — its calibrated σ, not
    the σ a planted bug really adds — from the engine's label distributions (stats/exact.py): the attack's
    efficiency at the claim, which the system under test cannot raise (stats/verdict.py). Empty for every
    other mechanism (its efficiency is measured)."""
    from app.audit.stats.exact import exact_vote_audit

    mechanism, theory = setup.mechanism, setup.mechanism.theory
    if mechanism.name != "private_voting" or theory is None or not theory.sigma:
        return {}
    assert isinstance(mechanism, PrivateVoting)  # its name says so
    answers = setup.query.answers
    exact = exact_vote_audit(
        mechanism.label_probs(setup.prompts_in, answers, setup.source),
        mechanism.label_probs(setup.prompts_out, answers, setup.source),
        sigma=theory.sigma,
        target=setup.target.positive,
        other=setup.target.negative,
        delta=theory.delta,
    )
    mus = {"black_box": exact.mu_black_box, "white_box": exact.mu_white_box}
    return {tm: float(mus[tm]) for tm in threat_models if math.isfinite(mus[tm])}


def _exact(setup: Setup, ctx: RunContext, threat_models: tuple[str, ...]) -> dict[str, dict]:
    """`exact`: population TPR/FPR from the engine's label distributions (private voting only).

    Both ε come from exact.py, which takes FNR and TNR from their own tails (1 − TPR cancels at large ε and
    overstated ε_af); a value that is still not finite is stored as null with its `*_unbounded` flag, the
    way the trial bounds report one, so a result is always valid JSON."""
    from app.audit.stats.exact import exact_vote_audit

    request, mechanism, query = setup.request, setup.mechanism, setup.query
    assert isinstance(mechanism, PrivateVoting)  # the request allows `exact` for private voting only
    ctx.progress("collect C1", 0.0, "label distributions with the canary")
    probs_in = mechanism.label_probs(setup.prompts_in, query.answers, setup.source)
    ctx.progress("collect C0", 0.3, "label distributions without the canary")
    probs_out = mechanism.label_probs(setup.prompts_out, query.answers, setup.source)
    ctx.progress("bound", 0.6, "exact audit")
    exact = exact_vote_audit(
        probs_in,
        probs_out,
        sigma=mechanism.std,
        target=setup.target.positive,
        other=setup.target.negative,
        delta=request.delta,
    )
    bounds: dict[str, dict] = {}
    for tm in threat_models:
        if tm == "black_box":
            bounds[tm] = {"tpr": exact.tpr_black_box, "fpr": exact.fpr_black_box}
            mu, eps, free = (
                exact.mu_black_box,
                exact.epsilon_black_box,
                exact.epsilon_black_box_assumption_free,
            )
        else:
            bounds[tm] = {"threshold": exact.best_threshold}
            mu, eps, free = (
                exact.mu_white_box,
                exact.epsilon_white_box,
                exact.epsilon_white_box_assumption_free,
            )
        values = {"mu_lower": mu, "epsilon_empirical": eps, "epsilon_empirical_assumption_free": free}
        for key, value in values.items():
            finite = value is not None and math.isfinite(value)
            bounds[tm][key] = float(value) if finite else None
            if not finite:
                bounds[tm][f"{key}_unbounded"] = True
    return bounds


def _trial_bounds(setup: Setup, trials, ctx: RunContext, auditor: Auditor) -> dict:
    """Both lower bounds per threat model from the trials (`auditor.bound`); progress is reported before
    each threat model's threshold search (the cancel point)."""
    bounds = {}
    for i, tm in enumerate(auditor.threat_models):
        ctx.progress("bound", 0.95 + 0.05 * i / len(auditor.threat_models), f"{tm} lower bound")
        if tm == "black_box":
            bounds[tm] = auditor.bound(trials.decisions_in.astype(float), trials.decisions_out.astype(float))
        else:
            bounds[tm] = auditor.bound(trials.scores_in, trials.scores_out)
    return bounds


def _simulation_progress(ctx: RunContext, start: float) -> Callable[[float], None]:
    def report(fraction: float) -> None:
        ctx.progress("simulate", start + (0.95 - start) * fraction, f"{fraction:.0%} of the trials")

    return report


def _bootstrap(setup: Setup, ctx: RunContext):
    """`bootstrap` (003 Alg. 1): n_llm clean statistics per context — C1 and C0 from generators in the same
    state (common random numbers: a partition with the same prompt in both casts the same votes in call
    i) — then `trials` resampled releases per context."""
    from app.audit.stats.trials import bootstrap_trials

    request, mechanism, answers = setup.request, setup.mechanism, setup.query.answers
    n_clean = request.llm_calls
    ctx.progress("collect C1", 0.0, f"{n_clean} clean statistics with the canary")
    clean_in = mechanism.collect(setup.prompts_in, answers, setup.source, n_clean, setup.seeds.rng("pool"))
    ctx.progress("collect C0", 0.1, f"{n_clean} clean statistics without the canary")
    clean_out = mechanism.collect(setup.prompts_out, answers, setup.source, n_clean, setup.seeds.rng("pool"))
    ctx.progress("simulate", 0.2, f"{request.trials} trials per context")
    return bootstrap_trials(
        clean_in,
        clean_out,
        setup.release,
        n_trials=request.trials,
        rngs=(setup.seeds.rng("noise_in"), setup.seeds.rng("noise_out")),
        progress=_simulation_progress(ctx, 0.2),
    )


def _direct(setup: Setup, ctx: RunContext):
    """`direct`: every trial a fresh mechanism call — a new clean statistic from the engine's (cached)
    answer distributions, then the release — in chunks of C1/C0 pairs, no resampling."""
    from app.audit.stats.trials import MAX_CHUNK, run_trials

    request, mechanism, answers = setup.request, setup.mechanism, setup.query.answers
    pools = setup.seeds.rng("pool"), setup.seeds.rng("pool")  # same state: common numbers
    prompts = setup.prompts_in, setup.prompts_out

    ctx.progress("simulate", 0.0, f"{request.trials} mechanism calls per context")
    return run_trials(
        lambda size: mechanism.collect_pair(prompts, answers, setup.source, size, pools),
        setup.release,
        n_trials=request.trials,
        rng_in=setup.seeds.rng("noise_in"),
        rng_out=setup.seeds.rng("noise_out"),
        max_chunk=mechanism.call_batch or MAX_CHUNK,
        progress=_simulation_progress(ctx, 0.0),
    )


ESTIMATORS = {"bootstrap": _bootstrap, "direct": _direct}


def run(request: Request, ctx: RunContext) -> MiaAuditResult:
    """The membership audit; see the module docstring. Progress: collect C1, collect C0, simulate, bound."""
    if request.target is not None:  # a deployed chat app is the model (app/audit/mechanisms/http_endpoint.py)
        ctx = dataclasses.replace(ctx, engines=TargetEngines(ctx, request.target))
    meter = None
    if request.budget is not None:  # the spend is checked and shown at every progress report
        ctx, meter = with_budget(ctx, request.budget)
        ctx = dataclasses.replace(ctx, extra={**ctx.extra, "meter": meter})
    started = time.monotonic()
    try:
        if request.attack.name == "auto":
            result = _run_auto(request, ctx)
        else:
            module = attack_module(request.attack.name)
            own_audit = getattr(module, "run_audit", None)
            owns = getattr(module, "owns_audit", lambda _request: True)
            # an attack over several canaries runs its own trials
            own = own_audit is not None and owns(request)
            result = own_audit(request, ctx) if own_audit is not None and own else _run_trials(request, ctx)
        return MiaAuditResult.model_validate(judged(request, result, seconds=time.monotonic() - started))
    except BudgetExhausted as exc:  # stopped before a trial on each side: fail with the final spend
        raise (meter.unfinished(exc, "a trial on each side") if meter is not None else exc) from None


SUBJECTS = {
    "none": "Plain ICL",
    "prompt_defense": "The prompt defense",
    "http_endpoint": "The endpoint",
}


def judged(request: Request, result: dict, seconds: float | None = None) -> dict:
    """The result with its verdict (app/audit/stats/verdict.py): `violation` against a claim, `leak` above
    `max_epsilon` without one, `inconclusive` without the power to see either, else `consistent`; and its
    `next_steps` (app/audit/stats/next_steps.py; `seconds`: the run's wall time, for their estimates)."""
    from app.audit.stats.verdict import judge, membership_test

    claimed = result.get("epsilon_theory")
    tests = [
        membership_test(
            name,
            bound,
            delta=request.delta,
            confidence=request.confidence,
            threshold=claimed if claimed is not None else request.max_epsilon,
        )
        for name in THREAT_MODELS
        if (bound := result.get(name))
    ]
    mechanism = result.get("mechanism") or {}
    blocked = None
    if mechanism.get("canary_included") is False:
        blocked = "no partition held the canary (disjoint_poisson left it out), so the audit could not see it"
    aucs = [b["auc"] for b in (result.get(n) for n in THREAT_MODELS) if b and b.get("auc") is not None]
    judgement = judge(
        tests,
        claimed=claimed,
        max_epsilon=request.max_epsilon,
        confidence=request.confidence,
        subject=SUBJECTS.get(request.mechanism.name, "The mechanism"),
        auc=max(aucs) if aucs else None,
        blocked=blocked,
    )
    verdict = judgement.as_dict()
    stop = result.get("stopped")
    if stop and judgement.verdict != "violation":
        reason = f"{stop['message']}; judged on the {stop['trials']} trials per context it finished"
        verdict.update(
            verdict="inconclusive", verdict_reason=reason, headline=f"Inconclusive (budget): {reason}"
        )
    if result.get("calibration_valid") is False and judgement.verdict != "violation":
        ceiling = result.get("epsilon_ceiling")
        exact = f"{ceiling:.3g}" if isinstance(ceiling, int | float) else "above the claim"
        reason = (
            f"the calibrated noise's exact ε at δ is {exact}, above the claimed {claimed:.3g}: the claim fails "
            "in theory, before any attack"
        )
        verdict.update(verdict="violation", verdict_reason=reason, headline=f"Violation in theory: {reason}")
    result.update(verdict)
    result["max_epsilon"] = request.max_epsilon if claimed is None else None
    result["violation"] = result["verdict"] == "violation"
    if steps := _next_steps(request, result, tests, claimed, seconds):
        result["next_steps"] = steps
    return result


def _next_steps(
    request: Request, result: dict, tests: list, claimed: float | None, seconds: float | None
) -> list:
    """The result's next steps: an audit over several canaries scales its contexts per record, one canary
    its trials; the run's seconds scale with them only when calls to a model or endpoint, made per trial
    (direct, several canaries), are its cost; else (the oracle's fixed setup, a bootstrap's calls made
    once) the seconds are not known here."""
    from app.audit.stats.next_steps import MAX_CONTEXTS, MAX_TRIALS, membership

    records = result.get("records")
    if isinstance(records, list) and records:
        field, units = "attack.contexts", max(int(r.get("trials") or 0) for r in records) or 1
        limit = MAX_CONTEXTS
    else:
        field, units, limit = "trials", int(result.get("trials") or request.trials), MAX_TRIALS
    spent = (result.get("spent") or {}).get("seconds", seconds)
    calls = request.model not in (None, "oracle") or request.target is not None or "endpoint_calls" in result
    scales = result.get("estimator") == "direct" and calls
    return membership(
        request,
        result,
        tests,
        claimed=claimed,
        field=field,
        units=units,
        seconds=spent if scales else None,
        limit=limit,
    )


def _text(prompt: Any) -> str | None:
    """A prompt's user text (an endpoint call's `user`), or None."""
    return getattr(prompt, "text", None) or getattr(prompt, "user", None)


def _evidence(setup: Setup, trials: Any) -> dict:
    """The bounded sample a person reads (attacks/evidence.py): the canary, the query, the canary's partition
    prompt with and without it, the first trials of C1 and C0. Nothing is drawn: no number moves."""
    from app.audit.attacks.evidence import one_canary

    canary = setup.contexts.canary
    at = next((k for k, part in enumerate(setup.parts_in) if canary in part), None)
    at_out = at if at is not None and at < len(setup.prompts_out) else None
    return one_canary(
        canary=canary.text,
        query=_text(setup.query.prompt(())),
        prompt_in=_text(setup.prompts_in[at]) if at is not None else None,
        prompt_out=_text(setup.prompts_out[at_out]) if at_out is not None else None,
        answers=setup.query.answers,
        positive=setup.query.positive,
        trials=trials,
    )


def _run_auto(request: Request, ctx: RunContext) -> dict:
    """`attack: auto`: the pilot chooses design and T on records and a seed stream the measurement never
    uses (app/audit/design.py); the measurement is the chosen design's audit on the other records."""
    from app.audit.design import choose

    if ctx.datasets is None or ctx.engines is None:
        raise AuditError("a mia audit needs datasets and engines in its run context")
    ctx.progress("pilot", 0.0, "choosing the canary design on the pilot records")
    llm = ctx.engines.llm(request.model or "oracle")
    assert request.dataset is not None  # the request's validator requires one
    choice = choose(request, ctx.datasets.load(request.dataset), llm, SeedTree.from_seed(request.seed))
    chosen = request.model_copy(
        update={
            "attack": request.attack.model_copy(update={"name": choice.attack}),
            "mechanism": request.mechanism.model_copy(update={"partitions": choice.partitions}),
        }
    )
    result = _run_trials(chosen, ctx, measured=True)
    result["design"] = choice.as_dict()
    if "canary_search" in result:
        result["design"]["canary_search"] = result.pop("canary_search")
    return result


def _run_trials(request: Request, ctx: RunContext, measured: bool = False) -> dict:
    """The membership audit of one canary: contexts → clean statistics → trials → both bounds."""
    setup = _setup(request, ctx, measured)
    mechanism, llm = setup.mechanism, setup.llm
    passes_before = llm.counters.forward_passes if llm is not None else 0
    theory = mechanism.theory
    auditor = Auditor.for_request(
        request,
        gaussian=mechanism.gaussian,
        claimed=theory.epsilon if theory is not None else None,
        seeds=setup.seeds,
    )
    evidence, trials = None, None
    if request.estimator == "exact":
        exact = _exact(setup, ctx, auditor.threat_models)
        setup.meter.settle()  # the calls are over: the bounds finish whatever the clock says
        bounds = {tm: auditor.judge(fields) for tm, fields in exact.items()}
    else:
        trials = ESTIMATORS[request.estimator](setup, ctx)
        setup.meter.settle()
        bounds = _trial_bounds(setup, trials, ctx, auditor)
        evidence = _evidence(setup, trials)

    for tm, mu in _design_mus(setup, auditor.threat_models).items():
        bounds[tm]["mu_design"] = mu
    result: dict = {"estimator": request.estimator, **bounds}
    if trials is not None and trials.stopped is not None:
        result["stopped"] = stopped(trials.stopped, trials=trials.done)
    if theory is not None:
        result.update(theory.as_dict())
    else:
        result.update(epsilon_theory=None, mu_theory=None, epsilon_ceiling=None)
    result["violation"] = any(b["violation"] for b in bounds.values())
    result["assumption"] = auditor.assumption
    result["confidence"] = {"stated": request.confidence, **auditor.confidence_split}
    result["theory_violation"] = result.get("calibration_valid") is False
    result.update(mechanism.result_extras())
    from app.audit.design import canary_signal

    result["signal"] = canary_signal(
        mechanism, setup.query, setup.prompts_in, setup.prompts_out, setup.source
    )
    if setup.search is not None:
        result["canary_search"] = setup.search
    if mechanism.needs_llm:  # an endpoint's calls are its own (endpoint_calls): no model fields
        result["llm_forward_passes"] = llm.counters.forward_passes - passes_before
        result["distinct_prompts"] = setup.source.distinct_prompts
        result["llm_calls"] = request.llm_calls
    result["trials"] = trials.done if trials is not None else None
    result["canary"] = setup.contexts.canary.text
    result["mechanism"] = {
        "name": request.mechanism.name,
        "partitions": len(setup.parts_in),
        "bug": request.mechanism.bug,
        "gaussian": mechanism.gaussian,
        "canary_included": mechanism.canary_included,
    }
    result["evidence"] = evidence
    result["utility"] = None
    if request.utility_queries and "stopped" in result:
        result["utility"] = {"skipped": f"{result['stopped']['message']}: no utility calls after the stop"}
    elif request.utility_queries:
        from app.audit.icl.utility import utility

        result["utility"] = utility(
            mechanism,
            setup.dataset,
            setup.parts_out,
            setup.source,
            request.utility_queries,
            setup.seeds.rng("utility"),
        )
    if request.budget is not None:  # read last: the utility's calls are spent too
        result.update(setup.meter.as_dict())
    if ctx.on_counters is not None and llm is not None:
        ctx.on_counters(llm.counters.as_dict())
    ctx.progress("bound", 1.0, "done")
    return result


if __name__ == "__main__":
    from app.audit.standalone import main

    raise SystemExit(main())
