"""Plan an audit before spending: its calls, tokens, time and power, without running it.

`plan_request` answers for every kind (`bound`, `iclinf` and `synthetic_generation` at the end of this
module). A `mia` request is rehearsed: its contexts, partitions and the attack's prompts are built exactly
as the run builds them (`mia._setup`, same seeds), with a stand-in engine that answers every label uniformly
and counts what it is asked. The model's calls are the distinct prompts the run sends (`distinct_prompts`
in its result; each goes to the engine once, whatever the engine's batching); an endpoint's calls are
2 × `trials` (estimator `direct`: every trial one real call per context). Which prompts are asked does not
depend on the model's answers for label mechanisms at temperature 1 or with `label_logprobs` teachers, so
those counts are exact; for generation mechanisms and free-text teachers at τ ≠ 1 they are an estimate
(`exact: false`). Prompt tokens are the distinct
prompts' tokens through the model's own tokenizer and template (null without one: the oracle, an
endpoint); the engine counts fewer when prompts share a cached prefix. Under a budget the calls are those
the run makes, min(full run, cap), exact only when that is known exactly, with the full run's beside them
(`calls.full_run`, `_count_the_cap`).

Time: the rehearsal is timed at two trial counts (the faster of two runs each): contexts, trials and
bounds scaled linearly in the trials, the verdict's power search in log trials; the model's or endpoint's
part is its calls × the seconds per call measured on this deployment's finished audits (`rates`, given by
the caller; null without any; the oracle costs none). An endpoint or a chat-completions target is never
called by a plan.

Power (app/audit/stats/verdict.py's model): `epsilon_detectable` at the requested trials, assuming the
attack sees the claim's whole signal (η = 1; the run measures η), and the smallest trials, and so
`llm_calls` for the direct estimator, with which the audit could answer `consistent`
(ε_detectable ≤ POWER_FACTOR × the claim).
"""

from __future__ import annotations

import contextvars
import functools
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.audit.runtime import AuditError, RunContext
from app.engines.protocol import EngineCounters, Generation, PromptLike, Sampling

VOCAB = 64
"""The stand-in's vocabulary: the size of the next-token distributions a rehearsal samples from."""

SAMPLE_TRIALS = 50_000
"""The larger of the two trial counts the rehearsal is timed at (the smaller: 1/50 of it)."""


class PlanStopped(Exception):
    """The plan was stopped before it finished: its caller went away or its deadline passed."""


_stop_check: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "iclaudit_plan_stop_check", default=None
)


def _checkpoint(*_args: Any, **_kwargs: Any) -> None:
    """Raise PlanStopped when the plan being computed must stop (`plan_request(check=…)`): called at every
    stand-in engine call and progress report of a rehearsal, so a plan stops within one record's work."""
    check = _stop_check.get()
    if check is not None:
        check()


def rehearsed_pairs(request: Any) -> tuple[int, str] | None:
    """The plan's cost that grows without bound in the request, computed from it before any rehearsal: the
    (record, context) pairs a rehearsal of an attack over several canaries collects (`canaries` × `contexts`,
    each rehearsal collecting them all), and the field that asks for the more of them; None for a request
    whose rehearsal is bounded whatever it asks (SAMPLE_TRIALS, ICLINF_SAMPLE, one generated sequence)."""
    if request.kind != "mia":
        return None
    from app.audit.attacks.registry import attack_module

    attack = request.attack
    module = attack_module(attack.name)
    own = getattr(module, "run_audit", None) is not None and getattr(module, "owns_audit", lambda _r: True)(
        request
    )
    if not own and attack.name != "auto":
        return None
    field = "attack.contexts" if attack.contexts >= attack.canaries else "attack.canaries"
    return attack.canaries * attack.contexts, field


class _StandIn:
    """An engine that records what it is asked, running no model: the oracle's own answers for the
    oracle, else a distribution per prompt drawn from the prompt's hash (so contexts differ and the
    rehearsal's bounds and verdict cost what a real run's do)."""

    label_bound_is_upper = False

    def __init__(self, name: str) -> None:
        from app.engines.oracle import OracleEngine

        self.name = name
        self.counters = EngineCounters()
        self.prompts: list[PromptLike] = []
        self.generated_tokens = 0
        self.oracle = OracleEngine() if name == "oracle" else None

    def label_logprobs(self, prompts: Sequence[PromptLike], labels: Sequence[str]) -> np.ndarray:
        _checkpoint()
        self.prompts.extend(prompts)
        self.counters.forward_passes += len(prompts)
        if self.oracle is not None:
            return self.oracle.label_logprobs(prompts, labels)
        return self.label_logprobs_quiet(prompts, len(labels))

    def generate(self, prompts: Sequence[PromptLike], sampling: Sampling) -> list[list[Generation]]:
        _checkpoint()
        self.prompts.extend(prompts)
        # an upper bound: no early stop
        self.generated_tokens += len(prompts) * sampling.n * sampling.max_new_tokens
        if self.oracle is not None:
            return self.oracle.generate(prompts, sampling)
        return [[Generation("", (), ()) for _ in range(sampling.n)] for _ in prompts]

    def next_token_logprobs(self, prompts: Sequence[PromptLike], top_k: Any = "all") -> list[Any]:
        from app.engines.protocol import TokenDistribution

        _checkpoint()
        self.prompts.extend(prompts)
        self.counters.forward_passes += len(prompts)
        if self.oracle is not None:
            return self.oracle.next_token_logprobs(prompts, top_k)  # refuses: not a language model
        return [TokenDistribution(logprobs=row) for row in self.label_logprobs_quiet(prompts, VOCAB)]

    def label_logprobs_quiet(self, prompts: Sequence[PromptLike], size: int) -> np.ndarray:
        """A distribution over `size` outcomes per prompt, drawn from the prompt's hash (nothing recorded)."""
        rows = [
            np.random.default_rng(int.from_bytes(hashlib.sha256(repr(p).encode()).digest()[:8], "little"))
            for p in prompts
        ]
        return np.log(np.stack([rng.dirichlet(np.ones(size)) for rng in rows]))

    def decode(self, token_ids: Sequence[int]) -> str:
        return ""


def _model_name(request: Any) -> str:
    """The model the run asks: a chat-completions target's (never called here), or the registry's."""
    if getattr(request, "target", None) is not None:
        return f"target:{request.target.model}"
    return request.model or "oracle"


class _Engines:
    def __init__(self, name: str) -> None:
        self.stand_in = _StandIn(name)

    def llm(self, name: str) -> _StandIn:
        return self.stand_in

    def embedder(self, name: str | None = None) -> Any:
        raise AuditError("the plan covers mechanisms without an embedder (esa and ksa are not rehearsed)")


@dataclass(frozen=True)
class Rates:
    """Seconds per call measured on this deployment's finished audits (None: no such audit yet)."""

    model_seconds_per_call: float | None = None
    endpoint_seconds_per_call: float | None = None
    basis: str = ""
    model_fixed_seconds: float = 0.0
    endpoint_fixed_seconds: float = 0.0
    """Seconds an audit spends whatever its calls (setup, bounds, verdict), when the history could tell."""
    model_load_seconds: float | None = None
    """Seconds the model's latest load took (paid once per worker process; not in the rates above)."""

    @classmethod
    def fitted(
        cls,
        model: Sequence[tuple[int, float]],
        endpoint: Sequence[tuple[int, float]],
        basis: str,
        model_load_seconds: float | None = None,
    ) -> Rates:
        """From finished audits' (calls, seconds), model's and endpoint's apart (`fit_rate` each), their
        seconds without the model's load."""
        model_fit, endpoint_fit = fit_rate(model), fit_rate(endpoint)
        return cls(
            model_seconds_per_call=model_fit[1] if model_fit else None,
            endpoint_seconds_per_call=endpoint_fit[1] if endpoint_fit else None,
            basis=basis,
            model_fixed_seconds=model_fit[0] if model_fit else 0.0,
            endpoint_fixed_seconds=endpoint_fit[0] if endpoint_fit else 0.0,
            model_load_seconds=model_load_seconds,
        )


def fit_rate(points: Sequence[tuple[int, float]]) -> tuple[float, float] | None:
    """(fixed seconds, seconds per call) from finished audits' (calls, seconds): least squares when their
    calls differ (both terms ≥ 0), else the median of seconds / calls with no fixed part; None if empty."""
    if not points:
        return None
    calls = np.array([c for c, _ in points], dtype=float)
    seconds = np.array([t for _, t in points], dtype=float)
    if np.ptp(calls) > 0:
        slope, intercept = np.polyfit(calls, seconds, 1)
        if slope > 0 and intercept >= 0:
            return float(intercept), float(slope)
    return 0.0, float(np.median(seconds / calls))


def _trials_needed(
    detectable: Callable[[int], float], at: int, at_value: float, goal: float, max_trials: int
) -> int | None:
    """The smallest trials (to 5 %) at which `detectable(trials)` ≤ `goal`, searched from `at` (down when it
    already resolves, else up by ×4); None for no goal (0) or none within `max_trials`."""
    if goal <= 0:
        return None
    if at_value <= goal:
        lo, hi = 2, at
    else:
        lo, hi = at, at
        while detectable(hi) > goal and hi < max_trials:
            _checkpoint()
            lo, hi = hi, min(hi * 4, max_trials)
        if detectable(hi) > goal:
            return None
    while hi - lo > 1 and hi > 1.05 * lo:  # to 5 %, halving the ratio (not the gap)
        _checkpoint()
        mid = max(lo + 1, min(hi - 1, round(math.sqrt(lo * hi))))
        lo, hi = (lo, mid) if detectable(mid) <= goal else (mid, hi)
    return hi


def _power(request: Any, gaussian: bool, claimed: float | None, max_trials: int) -> dict:
    """epsilon_detectable at the requested trials (η = 1) and the trials needed for `consistent`."""
    from app.audit.stats.auditor import THREAT_MODELS, assumption_for
    from app.audit.stats.bounds import per_test_confidence
    from app.audit.stats.thresholds import SELECTION_PENALTY, bonferroni_tests
    from app.audit.stats.verdict import POWER_FACTOR, MembershipTest, epsilon_detectable

    threshold = claimed if claimed is not None else request.max_epsilon
    models = THREAT_MODELS if request.attack.threat_model == "both" else (request.attack.threat_model,)
    confidence = per_test_confidence(request.confidence, len(models))
    if request.threshold_strategy == "in_sample":
        reason = "threshold_strategy in_sample makes every verdict inconclusive (an optimistic bound)"
        return {"epsilon_detectable": None, "trials_needed": None, "llm_calls_needed": None, "note": reason}
    if request.estimator == "exact":
        return {
            "epsilon_detectable": None,
            "trials_needed": None,
            "llm_calls_needed": request.llm_calls,
            "note": "the exact estimator has no sampling error: its power is not limited by trials",
        }

    def detectable(trials: int) -> float:
        best = math.inf
        for tm in models:
            decision = tm == "black_box"
            strategy = None if decision else request.threshold_strategy
            n = trials - round(trials / 2) if strategy == "split" else trials
            test = MembershipTest(
                name=tm,
                n_in=n,
                n_out=n,
                confidence=confidence,
                delta=request.delta,
                assumption=assumption_for(request.assumption, gaussian),
                efficiency=1.0,
                epsilon_lower=0.0,
                selection_penalty=SELECTION_PENALTY if strategy == "split" else 1.0,
                tests=bonferroni_tests(n) if strategy == "bonferroni" else 1,
            )
            best = min(best, epsilon_detectable(test, threshold))
        return best

    at_request = detectable(request.trials)
    needed = _trials_needed(detectable, request.trials, at_request, POWER_FACTOR * threshold, max_trials)
    direct = request.estimator == "direct"
    return {
        "epsilon_detectable": at_request if math.isfinite(at_request) else None,
        "trials_needed": needed,
        "llm_calls_needed": needed if direct else request.llm_calls,
        "note": "assumes the attack sees the claim's whole signal (η = 1); the run measures η"
        + ("" if direct else "; the bootstrap's power model counts trials, not llm_calls"),
    }


def _rehearse(request: Any, datasets: Any, trials: int) -> tuple[dict, _Engines, float, float]:
    """The audit run on a fresh stand-in engine at `trials`: (result, engines, seconds to the bounds,
    seconds of the verdict; 0 when the attack runs its own audit and the two are not apart)."""
    from app.audit.attacks.registry import attack_module
    from app.audit.kinds import mia

    engines = _Engines(_model_name(request))
    timed = _unbudgeted(request, trials=trials, target=None)  # a target is never called
    ctx = RunContext(progress=_checkpoint, engines=engines, datasets=datasets)
    module = attack_module(request.attack.name)
    own = getattr(module, "run_audit", None) is not None and getattr(module, "owns_audit", lambda _r: True)(
        timed
    )
    start = time.perf_counter()
    if own:
        result = mia.run(timed, ctx).stored()
        return result, engines, time.perf_counter() - start, 0.0
    result = mia._run_trials(timed, ctx)
    middle = time.perf_counter()
    result = mia.judged(timed, result)
    return result, engines, middle - start, time.perf_counter() - middle


def _compute_seconds(request: Any, datasets: Any) -> tuple[dict, _Engines, float]:
    """The run's own computation timed here at two trial counts, the faster of two runs each: contexts,
    trials and bounds extrapolated linearly in the trials, the verdict's power search (whose bisection
    lengthens with the trials) in log trials. (The last rehearsal's result and engines, seconds.)"""
    small, large = min(request.trials, SAMPLE_TRIALS // 50), min(request.trials, SAMPLE_TRIALS)
    _rehearse(request, datasets, small)  # warm: dataset, imports, caches

    def fastest(trials: int) -> tuple[dict, _Engines, float, float]:
        runs = [_rehearse(request, datasets, trials) for _ in range(2)]
        return runs[-1][0], runs[-1][1], min(r[2] for r in runs), min(r[3] for r in runs)

    result, engines, b_small, j_small = fastest(small)
    if request.estimator == "exact" or large == small:
        return result, engines, b_small + j_small
    result, engines, b_large, j_large = fastest(large)
    n = request.trials
    bounds = b_large + max(0.0, (b_large - b_small) / (large - small)) * (n - large)
    judge = j_large + max(0.0, (j_large - j_small) / math.log(large / small)) * math.log(n / large)
    return result, engines, bounds + judge


@functools.lru_cache(maxsize=8)
def model_tokens(name: str | None) -> Callable[[PromptLike], int] | None:
    """A prompt's token count through the model's own tokenizer and template (the loaded engine's, or
    the tokenizer alone for a local transformers model); None for the oracle, an API model or a GGUF."""
    from app.engines import registry

    if not name:
        return None
    try:
        info = registry.get_model_info(name)
    except KeyError:
        return None
    engine = registry._LLMS.get(name)
    if engine is not None and hasattr(engine, "format_ids"):
        return lambda prompt: len(engine.format_ids(prompt))
    if info.engine not in ("transformers", "vllm") or info.source is None:
        return None
    from pathlib import Path

    from transformers import AutoTokenizer

    from app.config import get_settings
    from app.engines.gguf import gguf_cache_dir
    from app.engines.transformers_engine import format_prompt_ids

    source = Path(str(info.source))
    gguf = source / str(info.options["gguf_file"]) if info.options.get("gguf_file") else source
    if gguf.suffix == ".gguf":
        converted = gguf_cache_dir(gguf, get_settings().model_cache_dir)
        if converted.is_dir():
            tokenizer = AutoTokenizer.from_pretrained(str(converted))
        else:
            tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    else:
        tokenizer = AutoTokenizer.from_pretrained(str(info.source))
    return lambda prompt: len(format_prompt_ids(tokenizer, info.chat, prompt))


def plan_mia(
    request: Any,
    *,
    datasets: Any,
    rates: Rates = Rates(),
    tokens: Callable[[PromptLike], int] | None = None,
    max_trials: int = 8_000_000,
) -> dict:
    """The plan of one `mia` request (the module docstring); `tokens` counts a prompt's model tokens."""
    from app.audit.kinds import mia

    endpoint = request.mechanism.name == "http_endpoint"
    engines = _Engines(_model_name(request))
    notes: list[str] = []
    sim, model_calls = 0.0, 0
    setup = mia._setup(
        request.model_copy(update={"target": None}),
        RunContext(progress=_checkpoint, engines=engines, datasets=datasets),
    )
    theory = setup.mechanism.theory
    claimed = theory.epsilon if theory is not None else None
    if not endpoint:
        result, engines, sim = _compute_seconds(request, datasets)
        model_calls = int(result.get("distinct_prompts") or 0) if setup.mechanism.needs_llm else 0
    stand_in = engines.stand_in
    spec = request.mechanism.endpoint
    per_trial = (
        1 + len(spec.steps) + (spec.close is not None) if endpoint else 0
    )  # a multi-step target's requests
    endpoint_calls = 2 * request.trials * per_trial
    decoded = request.mechanism.temperature != 1.0 and request.mechanism.teacher_output == "free_text"
    exact = endpoint or not any([decoded, stand_in.generated_tokens, setup.mechanism.needs_embedder])
    prompt_tokens = None
    if tokens is not None and model_calls:
        prompt_tokens = sum(tokens(p) for p in dict.fromkeys(stand_in.prompts))  # each rehearsal's prompts
    seconds: float | None = sim
    if model_calls and _model_name(request) == "oracle":
        rates = Rates(
            0.0,
            rates.endpoint_seconds_per_call,
            rates.basis or "the oracle: no model to wait for",
            endpoint_fixed_seconds=rates.endpoint_fixed_seconds,
        )
    if model_calls:
        per = rates.model_seconds_per_call
        seconds = None if per is None else sim + rates.model_fixed_seconds + per * model_calls
    if endpoint_calls:
        per = rates.endpoint_seconds_per_call  # one call's seconds, one in flight (measured_rates)
        seconds = (
            None if per is None else endpoint_seconds(spec, endpoint_calls, per, rates.endpoint_fixed_seconds)
        )
    if seconds is None:
        notes.append("no finished audit on this deployment to measure its throughput from")
    power = _power(request, setup.mechanism.gaussian, claimed, max_trials)
    plan_time = {
        "expected_seconds": seconds,
        "compute_seconds": sim,
        "model_seconds_per_call": rates.model_seconds_per_call if model_calls else None,
        "endpoint_seconds_per_call": rates.endpoint_seconds_per_call if endpoint_calls else None,
        "fixed_seconds": rates.endpoint_fixed_seconds if endpoint_calls else rates.model_fixed_seconds,
        "basis": rates.basis,
    }
    plan_power = {
        "trials": request.trials,
        "llm_calls": request.llm_calls,
        "estimator": request.estimator,
        **power,
    }
    if endpoint:  # an endpoint's calls are its trials: no model fields
        plan_time.pop("model_seconds_per_call")
        plan_power.pop("llm_calls")
        plan_power.pop("llm_calls_needed", None)
    return {
        "kind": "mia",
        "calls": {"model": model_calls, "endpoint": endpoint_calls, "exact": exact},
        "tokens": {
            "prompt": prompt_tokens,
            "generated": stand_in.generated_tokens if setup.mechanism.needs_llm else None,
        },
        "time": plan_time,
        "power": plan_power,
        "notes": notes,
    }


def _unbudgeted(request: Any, **changes: Any) -> Any:
    """The request with `changes` for a rehearsal, its budget (if its kind has one) left out: a stand-in
    engine's calls and seconds are no spend to stop at."""
    if "budget" in type(request).model_fields:
        changes["budget"] = None
    return request.model_copy(update=changes)


def _count_the_cap(request: Any, plan: dict) -> None:
    """The plan under the request's budget: `calls` become what the run makes, min(full run, cap), with
    `exact` true only when that is known exactly, the full run's calls beside them (`calls.full_run`),
    and a note per cap the full run would pass (the audit stops there and is judged on what it finished).

    An endpoint's calls are reserved a trial at a time (C1 and C0 interleaved), so `max_calls` stops them
    at the last whole trial under the cap, exactly; a model's are checked a batch of prompts at a time, so
    under a cap they are an upper bound. `max_tokens` and `max_seconds` stop at a point the plan cannot
    know exactly (tokens and seconds are measured as the run goes), so a cap the full run may pass makes
    the calls an upper bound."""
    budget = getattr(request, "budget", None)
    if budget is None:
        return
    calls = plan["calls"]
    full = {"model": calls["model"], "endpoint": calls["endpoint"]}
    calls["full_run"] = full
    total = full["model"] + full["endpoint"]
    tokens = (plan["tokens"]["prompt"] or 0) + (plan["tokens"]["generated"] or 0)
    seconds = plan["time"]["expected_seconds"]
    notes = []
    if budget.max_calls is not None and total > budget.max_calls:
        if full["endpoint"]:
            per_trial = _endpoint_calls_per_trial(request)
            calls["endpoint"] = min(full["endpoint"], budget.max_calls // per_trial * per_trial)
        else:
            calls["model"] = budget.max_calls
            calls["exact"] = False
        t = plan["time"]
        if seconds is not None and full["endpoint"]:  # the time of the calls made
            per, fixed = t["endpoint_seconds_per_call"], t["fixed_seconds"]
            seconds = endpoint_seconds(request.mechanism.endpoint, calls["endpoint"], per, fixed)
        elif seconds is not None and t.get("model_seconds_per_call") is not None:
            seconds = t["compute_seconds"] + t["fixed_seconds"] + t["model_seconds_per_call"] * calls["model"]
        t["expected_seconds"] = seconds
        notes.append(
            f"budget.max_calls = {budget.max_calls:g} is below the planned {total:g} calls of the full run: "
            f"the audit makes {'' if calls['exact'] else 'at most '}{calls['model'] + calls['endpoint']:g}"
            f"{_stop_outcome(request)}"
        )
    if budget.max_tokens is not None and plan["tokens"]["prompt"] is not None and tokens > budget.max_tokens:
        calls["exact"] = False
        notes.append(
            f"budget.max_tokens = {budget.max_tokens:g} is below the planned {tokens:.4g} tokens of the full "
            f"run: the audit stops there{_stop_outcome(request)}"
        )
    if budget.max_seconds is not None and total and (seconds is None or seconds > budget.max_seconds):
        calls["exact"] = False
        planned = "an unknown time" if seconds is None else f"the planned {seconds:.4g} s"
        notes.append(
            f"budget.max_seconds = {budget.max_seconds:g} may be below {planned} of the full run: the calls "
            f"are an upper bound, and the audit stops there{_stop_outcome(request)}"
        )
    plan["notes"] = [*plan["notes"], *notes]


def _endpoint_calls_per_trial(request: Any) -> int:
    """Requests one endpoint trial sends: the audited call, a multi-step target's steps and its close."""
    spec = request.mechanism.endpoint
    return 1 + len(spec.steps) + (spec.close is not None)


def _stop_outcome(request: Any) -> str:
    """What a stop leaves: judged on what it finished, or (a model mia audit whose calls all come before
    its first trial) a failure naming the cap."""
    if request.kind == "mia" and request.mechanism.name != "http_endpoint" and request.estimator != "direct":
        return " before its first trial: it would fail naming the cap"
    return " and is judged on what it finished (inconclusive: budget)"


def _expected(sim: float, calls: int, per: float | None, fixed: float) -> float | None:
    """The run's compute plus its calls at the measured rate (None without one; no calls: compute only)."""
    if not calls:
        return sim
    return None if per is None else sim + fixed + per * calls


def _model_time(sim: float, calls: int, rates: Rates) -> dict:
    return {
        "expected_seconds": _expected(sim, calls, rates.model_seconds_per_call, rates.model_fixed_seconds),
        "compute_seconds": sim,
        "model_seconds_per_call": rates.model_seconds_per_call if calls else None,
        "endpoint_seconds_per_call": None,
        "fixed_seconds": rates.model_fixed_seconds,
        "basis": rates.basis,
    }


def _token_counter(tokens: Callable[[PromptLike], int] | None) -> Callable[[PromptLike], int] | None:
    """`tokens` remembered per prompt text (a rehearsal sends the same texts many times), continuations
    added as they are (the engine appends them whole)."""
    if tokens is None:
        return None
    from app.engines.protocol import Prompt

    @functools.lru_cache(maxsize=65_536)
    def of_text(text: str, system: str | None) -> int:
        return tokens(Prompt(text=text, system=system))

    def count(prompt: PromptLike) -> int:
        p = prompt if isinstance(prompt, Prompt) else Prompt(text=prompt)
        return of_text(p.text, p.system) + len(p.continuation)

    return count


ICLINF_SAMPLE = 200
"""Queries an `iclinf` plan rehearses (all of them when fewer): every query sends the same number of
prompts, so the calls are exact at any m; tokens and compute are scaled from the sample."""


def iclinf_prompts(shots: int, queries: int, output_space: str, calibration: bool, content_free: str) -> int:
    """Prompts an `iclinf` run sends its engine (app/audit/kinds/iclinf.py): per query the k + 1
    leave-one-out prompts, each again per content-free input with calibration, and with the vocabulary
    output space the full prompt once more for its label scores (and its content-free inputs)."""
    from app.audit.icl.iclinf import CONTENT_FREE_INPUTS

    cf = len(CONTENT_FREE_INPUTS[content_free]) if calibration else 0
    per_query = (shots + 1) * (1 + cf) + (1 + cf if output_space == "vocabulary" else 0)
    return per_query * queries


def synthetic_prompts_per_step(batch_size: int, variant: str) -> int:
    """Prompts a `synthetic_generation` step sends: the s private ones, and the public one with `svt`."""
    return batch_size + (1 if variant == "svt" else 0)


def endpoint_seconds(spec: Any, calls: int, per_call: float, fixed: float) -> float:
    """Expected wall time of `calls` endpoint calls: fixed + calls · per_call / max_concurrency (the calls
    overlap), and no less than fixed + calls / rate when the request caps the rate."""
    seconds = fixed + calls * per_call / spec.max_concurrency
    return max(seconds, fixed + calls / spec.rate) if spec.rate else seconds


def run_calls(kind: str, request: dict, result: dict) -> tuple[str, int] | None:
    """("model" or "endpoint", calls) of a finished audit, counted as its plan counts them (the history
    a plan's seconds per call are measured from), an endpoint's in call-slots (its calls over the
    max_concurrency they were made at, so the rate is one call's seconds); None when it made none."""
    if kind == "mia":
        endpoint = (request.get("mechanism") or {}).get("endpoint") or {}
        if endpoint.get("url") and result.get("endpoint_calls"):
            # in call-slots: calls made c at a time take the time of calls / c made one at a time
            return "endpoint", max(
                1, round(int(result["endpoint_calls"]) / int(endpoint.get("max_concurrency") or 1))
            )
        return ("model", int(result["distinct_prompts"])) if result.get("distinct_prompts") else None
    if kind == "iclinf":
        return "model", iclinf_prompts(
            int(result.get("shots") or request.get("shots") or 4),
            int(result.get("queries") or request.get("queries") or 500),
            str(request.get("output_space") or "labels"),
            bool(request.get("calibration")),
            str(request.get("content_free") or "blank"),
        )
    if kind == "synthetic_generation" and result.get("generated_tokens"):
        per_step = synthetic_prompts_per_step(int(result["batch_size"]), str(result.get("variant")))
        return "model", int(result["generated_tokens"]) * per_step
    return None


def plan_bound(request: Any, *, max_trials: int = 8_000_000) -> dict:
    """A `bound` calls nothing: zeros, the bound's own computation timed, and the closed-form power of
    the membership test its counts (or held-out scores) make (η = 1), with the trials per side needed."""
    from app.audit.kinds import bound
    from app.audit.stats.thresholds import SELECTION_PENALTY, bonferroni_tests
    from app.audit.stats.verdict import POWER_FACTOR, MembershipTest, epsilon_detectable

    start = time.perf_counter()
    result = bound.run(request, RunContext()).stored()
    sim = time.perf_counter() - start
    counts = result["counts"]
    held_in, held_out = counts["tp"] + counts["fn"], counts["fp"] + counts["tn"]
    given_in, given_out = (
        (held_in, held_out)
        if request.counts is not None
        else (len(request.scores_in), len(request.scores_out))
    )
    threshold = request.epsilon if request.epsilon is not None else request.max_epsilon
    split = result.get("threshold_strategy") == "split"

    def detectable_at(n_in: int, n_out: int) -> float:
        test = MembershipTest(
            name="bound",
            n_in=max(1, n_in),
            n_out=max(1, n_out),
            confidence=float(result.get("confidence") or request.confidence),
            delta=request.delta,
            assumption=request.assumption,
            efficiency=1.0,
            epsilon_lower=0.0,
            selection_penalty=SELECTION_PENALTY if split else 1.0,
            tests=bonferroni_tests(max(1, n_out)) if result.get("threshold_strategy") == "bonferroni" else 1,
        )
        return epsilon_detectable(test, threshold)

    def detectable(per_side: int) -> float:  # per side as given; the test holds the same share of them
        return detectable_at(round(per_side * held_in / given_in), round(per_side * held_out / given_out))

    power: dict[str, Any] = {"trials": {"in": given_in, "out": given_out}, "llm_calls": None}
    if result.get("biased"):
        note = "threshold_strategy in_sample gives no verdict (an optimistic bound)"
        power |= {"epsilon_detectable": None, "trials_needed": None, "llm_calls_needed": None, "note": note}
    else:
        at = detectable_at(held_in, held_out)
        side = min(given_in, given_out)
        needed = _trials_needed(detectable, side, detectable(side), POWER_FACTOR * threshold, max_trials)
        power |= {
            "epsilon_detectable": at if math.isfinite(at) else None,
            "trials_needed": needed,
            "llm_calls_needed": None,
            "note": "closed form at the given counts, assuming the test sees the claim's whole signal (η = "
            "1); trials_needed is per side (C1 and C0 alike)",
        }
    return {
        "kind": "bound",
        "calls": {"model": 0, "endpoint": 0, "exact": True},
        "tokens": {"prompt": 0, "generated": 0},
        "time": _model_time(sim, 0, Rates(basis="a bound calls no model: its computation, timed here")),
        "power": power,
        "notes": ["a bound calls no model and no endpoint: it is computed from the counts or scores given"],
    }


def plan_iclinf(
    request: Any, *, datasets: Any, rates: Rates = Rates(), tokens: Callable[[PromptLike], int] | None = None
) -> dict:
    """An `iclinf` request rehearsed on up to ICLINF_SAMPLE of its queries with the stand-in engine: its
    prompts (exact: the same number per query), their tokens and the computation scaled to all queries.
    It measures a loss and has no claim or verdict, so no power."""
    from app.audit.kinds import iclinf

    dataset = datasets.load(request.dataset)
    if len(dataset.test) < request.queries:  # the run's own refusal, which a smaller rehearsal would miss
        raise AuditError(f"queries={request.queries} exceeds the {len(dataset.test)} test examples")
    m = min(request.queries, ICLINF_SAMPLE)
    engines = _Engines(request.model)
    start = time.perf_counter()
    iclinf.run(
        _unbudgeted(request, queries=m), RunContext(progress=_checkpoint, engines=engines, datasets=datasets)
    )
    scale = request.queries / m
    sim = (time.perf_counter() - start) * scale
    sent = engines.stand_in.prompts
    calls = len(sent) // m * request.queries
    count = _token_counter(tokens)
    prompt_tokens = None if count is None else round(sum(count(p) for p in sent) * scale)
    notes = (
        [] if m == request.queries else [f"tokens and compute scaled from {m} of {request.queries} queries"]
    )
    return {
        "kind": "iclinf",
        "calls": {"model": calls, "endpoint": 0, "exact": True},
        "tokens": {"prompt": prompt_tokens, "generated": 0},
        "time": _model_time(sim, calls, rates),
        "power": {
            "trials": None,
            "llm_calls": None,
            "epsilon_detectable": None,
            "trials_needed": None,
            "llm_calls_needed": None,
            "note": "iclinf measures a privacy loss; it has no claim and no verdict to power",
        },
        "notes": notes,
    }


def plan_synthetic_generation(
    request: Any, *, datasets: Any, rates: Rates = Rates(), tokens: Callable[[PromptLike], int] | None = None
) -> dict:
    """A `synthetic_generation` request: its theory solved as the run solves it, one sequence rehearsed
    with the stand-in (the batch's prompts, the per-step computation), then N_gen · T_max steps of s
    prompts (+ the public one with svt): an upper bound, since a sequence stops at the model's end of
    text and svt once its private tokens are spent. The verdict measures the spent ε exactly, with no
    sampling error: any overspend of the claim is detected, with no trials to add."""
    from app.audit.kinds import synthetic_generation as sg

    params = sg.theory(request)
    s, n, t_max = params["batch_size"], request.sequences, request.max_new_tokens
    one = _unbudgeted(
        request,
        sequences=1,
        batch_size=s,
        clip=params["clip"],
        temperature=params["temperature"],
        target_epsilon=None,
        max_private_tokens=None,
    )
    engines = _Engines(request.model)
    start = time.perf_counter()
    sg.run(one, RunContext(progress=_checkpoint, engines=engines, datasets=datasets))
    sim = (time.perf_counter() - start) * n
    per_step = synthetic_prompts_per_step(s, request.variant)
    steps = n * t_max
    calls = steps * per_step
    count = _token_counter(tokens)
    prompt_tokens = None
    if count is not None:  # each step sends the batch's prompts continued by the tokens generated so far
        base = sum(count(p) for p in engines.stand_in.prompts[:per_step])
        prompt_tokens = n * (t_max * base + per_step * t_max * (t_max - 1) // 2)
    return {
        "kind": "synthetic_generation",
        "calls": {"model": calls, "endpoint": 0, "exact": False},
        "tokens": {"prompt": prompt_tokens, "generated": steps},
        "time": _model_time(sim, calls, rates),
        "power": {
            "trials": None,
            "llm_calls": None,
            "epsilon_theory": params["epsilon"],
            "epsilon_detectable": None,
            "trials_needed": None,
            "llm_calls_needed": calls,
            "note": "the spent ε is measured exactly (no sampling error, so no power to report): any overspend "
            "of ε_theory, or of what the accounted parameters allow on the same steps, is seen",
        },
        "notes": [
            f"calls and tokens are upper bounds: {steps} steps of {per_step} prompts, fewer when a sequence "
            "ends early" + (" or the sparse vector test spends its private tokens" if per_step > s else "")
        ],
    }


def plan_request(
    request: Any,
    *,
    datasets: Any,
    rates: Rates = Rates(),
    tokens: Callable[[PromptLike], int] | None = None,
    max_trials: int = 8_000_000,
    check: Callable[[], None] | None = None,
) -> dict:
    """The plan of a request of any kind (the module docstring). `check` is called at every step of the
    rehearsals and raises (PlanStopped) to stop the plan: its caller went away, its deadline passed."""
    token = _stop_check.set(check)
    try:
        return _plan_request(request, datasets=datasets, rates=rates, tokens=tokens, max_trials=max_trials)
    finally:
        _stop_check.reset(token)


def _plan_request(
    request: Any,
    *,
    datasets: Any,
    rates: Rates,
    tokens: Callable[[PromptLike], int] | None,
    max_trials: int,
) -> dict:
    if request.kind == "mia":
        plan = plan_mia(request, datasets=datasets, rates=rates, tokens=tokens, max_trials=max_trials)
    elif request.kind == "bound":
        plan = plan_bound(request, max_trials=max_trials)
    elif request.kind == "iclinf":
        plan = plan_iclinf(request, datasets=datasets, rates=rates, tokens=tokens)
    elif request.kind == "synthetic_generation":
        plan = plan_synthetic_generation(request, datasets=datasets, rates=rates, tokens=tokens)
    else:
        raise AuditError(f"kind {request.kind!r} cannot be planned")
    _count_the_cap(request, plan)
    # a worker that has not loaded the model yet adds its load to expected_seconds (a warm worker's time)
    plan["time"]["model_load_seconds"] = rates.model_load_seconds if plan["calls"]["model"] else None
    return plan
