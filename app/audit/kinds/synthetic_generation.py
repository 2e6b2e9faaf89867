"""`kind: "synthetic_generation"` — audit DP synthetic text generation (Amin et al. 2024; 001 §5, App. C).

A batch D of s one-shot prompts (001 Table 3, one private example each, all with the same label) drives
Alg. 1: per step the clipped next-token logits are averaged and the token is sampled from softmax(z̄/τ);
N_gen sequences of up to T_max tokens. Theory: (c, s, τ, N_gen, T_max, δ) → (ε_theory, α*) by Eq. 8 /
EM bound, N_gen·T_max-fold composition and Alg. 2; with `target_epsilon` the missing one of τ, c, s is
solved (Alg. 3). Audit: the per-step data-dependent RDP (Eq. 7, same clipped logits, no extra forward passes)
at every order of a grid, summed over the private tokens (Thm C.7): the curve `rdp_empirical` beside the
theory's `rdp_theory`, converted to ε_empirical by dp_accounting's RDP → (ε, δ) conversion (Balle et al. 2020
Thm 21 / Canonne-Kamath-Steinke Prop. 12, the formula of 001 Thm C.8) minimized over the orders. Both curves
are for remove-one neighbours, so nothing is doubled (001's ×2 of Thm C.9 is a pure-DP theorem): the batch
without one prompt, its sum still divided by s (app/audit/icl/synthetic.py), the neighbour whose sensitivity c/s
the theory assumes.

`variant: "svt"` runs Amin et al.'s full algorithm: public (context-free) logits and the sparse vector test;
only private tokens (at most `max_private_tokens` r) pay, each with one SVT run, and the theory is Amin et al.
Thm 1, ρ = r·(½(c/(sτ))² + 2/(sσ)²) (with the step's exponential-mechanism bound where it is smaller).

    python -m app.audit.kinds.synthetic_generation examples/synthgen-eps1.json
"""

from __future__ import annotations

from typing import Any, Literal, TypedDict

import numpy as np
from pydantic import ConfigDict, Field, model_validator
from pydantic_core import PydanticCustomError

from app.audit.accounting import MAX_EPSILON, MAX_SCALE, MIN_DELTA, MIN_EPSILON, MIN_SCALE, rdp
from app.audit.budget import (
    BudgetExhausted,
    BudgetSpec,
    MeteredEngine,
    stopped,
    stopped_verdict,
    with_budget,
)
from app.audit.icl.synthetic import SparseVectorTest, generate_private_sequence
from app.audit.icl.templates import generation_prompt, public_generation_prompt
from app.audit.kinds.base import (
    PUBLIC_TEMPERATURE,
    SVT_NOISE,
    SVT_THRESHOLD,
    AuditRequestBase,
    PublicTemperature,
    SvtNoise,
    SvtThreshold,
)
from app.audit.results.synthetic_generation import SyntheticGenerationAuditResult
from app.audit.runtime import AuditError, RunContext
from app.audit.stats.next_steps import budget_step
from app.audit.stats.verdict import judge_accounting
from app.schemas.errors import NO_SOLUTION

SOLVABLE = ("temperature", "clip", "batch_size")


_NUMBER, _NULL = {"type": "number"}, {"type": "null"}


def _solving(target: str | None) -> dict:
    """No target_epsilon and all of temperature, clip, batch_size given (None; temperature has no default), or
    target_epsilon given with `target` null (temperature: absent or null; clip, batch_size: null) and the
    other two given."""
    others = {name: _NUMBER for name in SOLVABLE if name != target}
    if target is None:
        return {"required": ["temperature"], "properties": {"target_epsilon": _NULL, **others}}
    required = ["target_epsilon"] if target == "temperature" else ["target_epsilon", "temperature", target]
    return {"required": required, "properties": {"target_epsilon": _NUMBER, target: _NULL, **others}}


# The schema states what _check_parameters checks, but for an infeasible target_epsilon (the
# RDP arithmetic: a 422 with reason NO_SOLUTION): max_private_tokens with variant svt only, and
# target_epsilon xor every one of temperature, clip and batch_size.
RULES_SCHEMA: dict = {
    "allOf": [
        {"anyOf": [{"required": ["variant"], "properties": {"variant": {"const": "svt"}}},
                   {"properties": {"max_private_tokens": _NULL}}]},
        {"anyOf": [_solving(None), *map(_solving, ("temperature", "clip", "batch_size"))]},
    ]
}  # fmt: skip


class Request(AuditRequestBase):
    model_config = ConfigDict(json_schema_extra=RULES_SCHEMA)

    kind: Literal["synthetic_generation"] = "synthetic_generation"
    dataset: str = Field(
        default="ag_news", description="Labelled dataset whose training texts are the private examples."
    )
    model: str = Field(description="Registered model name (GET /v1/models).")
    label: str = Field(
        default="Sports", description="The fixed label: private examples and generated texts have it."
    )
    batch_size: int | None = Field(default=50, ge=2, le=1000, description="s: one-shot prompts per batch.")
    clip: float | None = Field(
        default=10.0, ge=MIN_SCALE, le=MAX_SCALE, description="c: logit clipping level."
    )
    temperature: float | None = Field(
        default=None, ge=MIN_SCALE, le=MAX_SCALE, description="τ: sampling temperature."
    )
    target_epsilon: float | None = Field(
        default=None,
        ge=MIN_EPSILON,
        le=MAX_EPSILON,
        description="Solve the one of temperature/clip/batch_size left null so ε_theory = this.",
    )
    sequences: int = Field(default=50, ge=1, le=1000, description="N_gen: synthetic texts generated.")
    max_new_tokens: int = Field(default=40, ge=1, le=512, description="T_max: new tokens per text.")
    delta: float = Field(default=1e-5, ge=MIN_DELTA, lt=1, description="δ of the (ε, δ)-DP conversion.")
    variant: Literal["simplified", "svt"] = Field(
        default="simplified",
        description="simplified: every token private (001 Alg. 1); svt: Amin et al.'s public logits with the "
        "sparse vector test, only tokens where private and public predictions differ spend budget.",
    )
    svt_threshold: SvtThreshold = SVT_THRESHOLD
    svt_noise: SvtNoise = SVT_NOISE
    public_temperature: PublicTemperature = PUBLIC_TEMPERATURE
    max_private_tokens: int | None = Field(
        default=None,
        ge=1,
        le=512_000,
        description="svt: r, private tokens allowed in all (default N_gen·T_max).",
    )
    bug: Literal["temperature_scale", "clip_scale"] | None = Field(
        default=None,
        description="A planted mis-calibration (the bug zoo): the release samples at bug_factor × τ "
        "(temperature_scale) or clips at bug_factor × c (clip_scale) while the accounting keeps τ and c.",
    )
    bug_factor: float | None = Field(
        default=None,
        gt=0,
        le=100,
        description="The planted bug's factor (absent: 1, no change; ignored without bug).",
    )
    budget: BudgetSpec | None = Field(
        default=None,
        description="Caps on model calls (prompts sent: s a token, one more with svt), tokens and seconds "
        "(app/audit/budget.py). Stopped by one, the audit keeps the texts it finished and their measured RDP "
        "(a lower count of what the full run would spend), and is inconclusive: budget, unless that already "
        "exceeds epsilon_theory (a violation more tokens could not undo); stopped before its first text, it "
        "fails naming the cap.",
    )

    @model_validator(mode="after")
    def _check_parameters(self) -> Request:
        if self.variant == "simplified" and self.max_private_tokens is not None:
            raise ValueError(
                'max_private_tokens applies to variant "svt" only (simplified: every token is private)'
            )
        missing = [name for name in SOLVABLE if getattr(self, name) is None]
        if self.target_epsilon is None and missing:
            raise ValueError(
                f"{missing[0]} is required unless target_epsilon is given (then leave exactly one null)"
            )
        if self.target_epsilon is not None and len(missing) != 1:
            raise ValueError(
                "with target_epsilon leave exactly one of temperature, clip, batch_size null (the one to solve); "
                f"null now: {missing or 'none'}"
            )
        try:  # an infeasible target (no temperature/clip/batch size reaches it) is refused at submit
            theory(self)
        except ValueError as exc:  # arithmetic no schema states: the 422 says NO_SOLUTION
            message = f"target_epsilon: {exc}"
            raise PydanticCustomError(NO_SOLUTION, "{error}", {"error": message}) from None
        return self


def label_field(request: Request) -> str | None:
    """This kind always reads the records' labels (an unlabelled dataset cannot serve it)."""
    return "$.kind"


EXAMPLE: dict = {
    "kind": "synthetic_generation",
    "dataset": "dbpedia14",
    "model": "smollm2-135m-instruct",
    "label": "Athlete",
    "batch_size": 10,
    "clip": 10.0,
    "temperature": None,
    "target_epsilon": 1.0,
    "sequences": 2,
    "max_new_tokens": 8,
    "delta": 1e-5,
    "seed": 0,
}


def private_token_budget(request: Request) -> int:
    """Tokens that may spend budget: all N_gen·T_max (simplified), r = max_private_tokens at most that (svt)."""
    steps = request.sequences * request.max_new_tokens
    if request.variant == "svt" and request.max_private_tokens is not None:
        return min(steps, request.max_private_tokens)
    return steps


class Theory(TypedDict):
    """The accounted parameters of a run (τ, c, s), its RDP order α* and ε_theory."""

    temperature: float
    clip: float
    batch_size: int
    alpha: float
    epsilon: float


def theory(request: Request) -> Theory:
    """(τ, c, s, α*, ε_theory): solve the missing parameter from target_epsilon (Alg. 3) or account (Alg. 2)."""
    common: dict[str, Any] = {  # what every accountant call below takes
        "delta": request.delta,
        "sequences": request.sequences,
        "max_new_tokens": request.max_new_tokens,
        "svt_noise": request.svt_noise if request.variant == "svt" else None,
        "private_tokens": private_token_budget(request),
    }
    tau, clip, s = request.temperature, request.clip, request.batch_size
    if request.target_epsilon is not None:
        # the request's validator leaves exactly one of (τ, c, s) to solve for
        if tau is None:
            assert clip is not None and s is not None
            tau, alpha, eps = rdp.solve_temperature(
                target_epsilon=request.target_epsilon, clip=clip, batch_size=s, **common
            )
        elif clip is None:
            assert s is not None
            clip, alpha, eps = rdp.solve_clip(
                target_epsilon=request.target_epsilon, temperature=tau, batch_size=s, **common
            )
        else:
            s, alpha, eps = rdp.solve_batch_size(
                target_epsilon=request.target_epsilon, clip=clip, temperature=tau, **common
            )
    else:
        assert tau is not None and clip is not None and s is not None  # all given without a target
        eps, alpha = rdp.synthetic_generation_epsilon(clip=clip, batch_size=s, temperature=tau, **common)
    return {
        "temperature": float(tau),
        "clip": float(clip),
        "batch_size": int(s),
        "alpha": float(alpha),
        "epsilon": float(eps),
    }


def run(request: Request, ctx: RunContext) -> SyntheticGenerationAuditResult:
    engines = ctx.engines
    if engines is None or ctx.datasets is None:
        raise AuditError("synthetic_generation needs an engine and a dataset provider")
    params = theory(request)
    s, alpha = params["batch_size"], params["alpha"]
    dataset = ctx.datasets.load(request.dataset)
    private = [e for e in dataset.train if e.label == request.label]
    if len(private) < s:
        raise AuditError(
            f"dataset {request.dataset!r} has {len(private)} training examples labelled {request.label!r}; "
            f"batch_size={s} needs at least that many"
        )
    ctx, meter = with_budget(ctx, request.budget)
    raw_engine = engines.llm(request.model)
    passes_before = raw_engine.counters.forward_passes
    engine = MeteredEngine(raw_engine, meter) if request.budget is not None else raw_engine
    rng = np.random.default_rng(request.seed)
    batch = [private[i] for i in rng.choice(len(private), size=s, replace=False)]
    prompts = [generation_prompt(e.text, request.label) for e in batch]
    stop_ids = frozenset(getattr(engine, "eos_token_ids", ()) or ())
    orders = sorted({*rdp.EMPIRICAL_ORDERS, alpha})
    budget = private_token_budget(request)
    svt = None
    if request.variant == "svt":
        svt = SparseVectorTest(
            threshold=request.svt_threshold,
            noise=request.svt_noise,
            public_temperature=request.public_temperature,
            max_private_tokens=budget,
            rng=rng,
        )

    n, t_max = request.sequences, request.max_new_tokens
    texts: list[str] = []
    curve = np.zeros(len(orders))
    accounted = np.zeros(len(orders))  # what (τ, c, s) allow on the same steps (≠ curve only with a bug)
    released = None
    if request.bug == "temperature_scale":
        released = (params["clip"], params["temperature"] * float(request.bug_factor or 1.0))
    elif request.bug == "clip_scale":
        released = (params["clip"] * float(request.bug_factor or 1.0), params["temperature"])
    step_losses: list[list[float]] = []
    private_mask: list[list[bool]] = []
    at_alpha = orders.index(alpha)
    stop: BudgetExhausted | None = None
    try:
        for i in range(n):
            if svt is not None and svt.exhausted:
                break

            def on_token(t: int, i: int = i) -> None:
                ctx.progress(
                    "generate", (i * t_max + t + 1) / (n * t_max), f"sequence {i + 1}/{n}, token {t + 1}"
                )

            seq = generate_private_sequence(
                engine,
                prompts,
                clip=params["clip"],
                temperature=params["temperature"],
                max_new_tokens=t_max,
                orders=orders,
                rng=rng,
                stop_token_ids=stop_ids,
                on_token=on_token,
                public_prompt=public_generation_prompt(request.label) if svt is not None else None,
                svt=svt,
                released=released,
            )
            texts.append(seq.text)
            for step in seq.step_curves:
                curve += step
            for step in seq.accounted_curves:
                accounted += step
            step_losses.append([float(step[at_alpha]) for step in seq.step_curves])
            private_mask.append(list(seq.private))
    except BudgetExhausted as exc:  # a cap: keep the texts finished (app/audit/budget.py)
        if not texts:
            raise meter.unfinished(exc, "a text") from None
        stop = exc
    meter.settle()
    if svt is not None:
        curve += svt.rdp_curve(orders)
        accounted += svt.rdp_curve(orders)
    theory_curve = [
        rdp.synthetic_generation_rdp(
            a,
            clip=params["clip"],
            batch_size=s,
            temperature=params["temperature"],
            steps=budget,
            svt_noise=request.svt_noise if svt is not None else None,
        )
        for a in orders
    ]
    epsilon_empirical, alpha_empirical = rdp.rdp_curve_epsilon(orders, curve, request.delta)
    private_tokens = sum(sum(mask) for mask in private_mask)
    generated = sum(len(mask) for mask in private_mask)
    forward_passes = raw_engine.counters.forward_passes - passes_before
    if ctx.on_counters is not None:
        ctx.on_counters({"forward_passes": forward_passes})
    epsilon_accounted, _ = rdp.rdp_curve_epsilon(orders, accounted, request.delta)
    overspent = bool(np.any(curve > accounted * (1 + 1e-9) + 1e-12))
    verdict = judge_accounting(
        epsilon_empirical, params["epsilon"], accounted=epsilon_accounted, overspent=overspent
    ).as_dict()
    if stop is not None:
        verdict = stopped_verdict(stop, f"{len(texts)} of {n} texts", verdict)
        verdict["stopped"] = stopped(stop, texts=len(texts))
    if request.budget is not None:
        verdict.update(meter.as_dict())
    if stop is not None and verdict["verdict"] == "inconclusive":
        more = budget_step(verdict["stopped"], verdict.get("spent"), done=len(texts), needed=n, unit="texts")
        if more is not None:
            verdict["next_steps"] = [more.as_dict()]
    # fields the model does not declare pass as its extras, in their place
    violation: dict[str, Any] = {"violation": verdict["verdict"] == "violation"}
    accounted_batch: dict[str, Any] = {"epsilon_accounted_batch": epsilon_accounted}
    svt_fields: dict[str, Any] = (
        {
            "svt_threshold": request.svt_threshold,
            "svt_noise": request.svt_noise,
            "public_temperature": request.public_temperature,
            "max_private_tokens": budget,
            "svt_sensitivities": [float(d) for d in svt.all_runs()],
        }
        if svt is not None
        else {}
    )
    return SyntheticGenerationAuditResult(
        **verdict,
        **violation,
        kind="synthetic_generation",
        variant=request.variant,
        dataset=request.dataset,
        model=request.model,
        label=request.label,
        batch_size=s,
        clip=params["clip"],
        temperature=params["temperature"],
        sequences=len(texts) if stop is not None else n,
        max_new_tokens=t_max,
        delta=request.delta,
        target_epsilon=request.target_epsilon,
        epsilon_theory=params["epsilon"],
        alpha=alpha,
        epsilon_empirical=epsilon_empirical,
        **accounted_batch,
        alpha_empirical=alpha_empirical,
        orders=[float(a) for a in orders],
        rdp_empirical=[float(v) for v in curve],
        rdp_theory=[float(v) for v in theory_curve],
        generated_tokens=generated,
        private_tokens=private_tokens,
        public_tokens=generated - private_tokens,
        **svt_fields,
        step_losses=step_losses,
        private_mask=private_mask,
        texts=texts,
        llm_forward_passes=forward_passes,
    )


if __name__ == "__main__":
    from app.audit.standalone import main

    raise SystemExit(main())
