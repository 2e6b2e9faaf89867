"""Plan an audit before spending (issue 22 §1): its calls, tokens, time and power, without running it.

A `mia` request is rehearsed: its contexts, partitions and the attack's prompts are built exactly as the
run builds them (`mia._setup`, same seeds), with a stand-in engine that answers every label uniformly
and counts what it is asked. The model's calls are the distinct prompts the run sends (`distinct_prompts`
in its result; each goes to the engine once, whatever the engine's batching); an endpoint's calls are
2 × `trials` (estimator `direct`: every trial one real call per context). Which prompts are asked does not
depend on the model's answers for label mechanisms at temperature 1, so those counts are exact; for
generation mechanisms and τ ≠ 1 they are an estimate (`exact: false`). Prompt tokens are the distinct
prompts' tokens through the model's own tokenizer and template (null without one: the oracle, an
endpoint); the engine counts fewer when prompts share a cached prefix.

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

import functools
import hashlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.audit.runtime import AuditError, RunContext
from app.engines.protocol import EngineCounters, Generation, PromptLike

SAMPLE_TRIALS = 50_000
"""The larger of the two trial counts the rehearsal is timed at (the smaller: 1/50 of it)."""


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
        self.prompts.extend(prompts)
        self.counters.forward_passes += len(prompts)
        if self.oracle is not None:
            return self.oracle.label_logprobs(prompts, labels)
        rows = [
            np.random.default_rng(int.from_bytes(hashlib.sha256(repr(p).encode()).digest()[:8], "little"))
            for p in prompts
        ]
        return np.log(np.stack([rng.dirichlet(np.ones(len(labels))) for rng in rows]))

    def generate(
        self,
        prompts: Sequence[PromptLike],
        *,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int = 0,
        n: int = 1,
    ) -> list[list[Generation]]:
        self.prompts.extend(prompts)
        self.generated_tokens += len(prompts) * n * max_new_tokens  # an upper bound: no early stop
        if self.oracle is not None:
            return self.oracle.generate(
                prompts, max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed, n=n
            )
        return [[Generation("", (), ()) for _ in range(n)] for _ in prompts]


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


def _power(request: Any, gaussian: bool, claimed: float | None, max_trials: int) -> dict:
    """epsilon_detectable at the requested trials (η = 1) and the trials needed for `consistent`."""
    from app.audit.stats.auditor import THREAT_MODELS, assumption_for
    from app.audit.stats.bounds import per_test_confidence
    from app.audit.stats.thresholds import SELECTION_PENALTY
    from app.audit.stats.verdict import POWER_FACTOR, MembershipTest, epsilon_detectable, power_uniforms

    threshold = claimed if claimed is not None else request.max_epsilon
    models = THREAT_MODELS if request.attack.threat_model == "both" else (request.attack.threat_model,)
    confidence = per_test_confidence(request.confidence, len(models))
    uniforms = power_uniforms(np.random.default_rng(0))
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
            n = trials if decision or request.threshold_strategy != "split" else trials - round(trials / 2)
            penalty = 1.0 if decision else SELECTION_PENALTY
            test = MembershipTest(
                name=tm,
                n_in=n,
                n_out=n,
                confidence=confidence,
                delta=request.delta,
                assumption=assumption_for(request.assumption, gaussian),
                efficiency=1.0,
                epsilon_lower=0.0,
                selection_penalty=penalty,
            )
            best = min(best, epsilon_detectable(test, threshold, uniforms))
        return best

    at_request = detectable(request.trials)
    needed: int | None = None
    if threshold > 0:
        goal = POWER_FACTOR * threshold
        if at_request <= goal:
            hi = request.trials
            lo = 2
        else:
            lo, hi = request.trials, request.trials
            while detectable(hi) > goal and hi < max_trials:
                lo, hi = hi, min(hi * 4, max_trials)
            hi = hi if detectable(hi) <= goal else None  # type: ignore[assignment]
        if hi is not None:
            while hi - lo > 1 and hi > 1.05 * lo:  # to 5 %, halving the ratio (not the gap)
                mid = max(lo + 1, min(hi - 1, round(math.sqrt(lo * hi))))
                lo, hi = (lo, mid) if detectable(mid) <= goal else (mid, hi)
            needed = hi
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
    timed = request.model_copy(update={"trials": trials, "target": None})  # a target is never called
    ctx = RunContext(engines=engines, datasets=datasets)
    module = attack_module(request.attack.name)
    own = getattr(module, "run_audit", None) is not None and getattr(module, "owns_audit", lambda _r: True)(
        timed
    )
    start = time.perf_counter()
    if own:
        result = mia.run(timed, ctx)
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
        request.model_copy(update={"target": None}), RunContext(engines=engines, datasets=datasets)
    )
    theory = setup.mechanism.theory
    claimed = theory.epsilon if theory is not None else None
    if not endpoint:
        result, engines, sim = _compute_seconds(request, datasets)
        model_calls = int(result.get("distinct_prompts") or 0) if setup.mechanism.needs_llm else 0
    elif request.utility_queries:
        notes.append("utility queries to the endpoint are not counted")
    stand_in = engines.stand_in
    spec = request.mechanism.endpoint
    per_trial = (
        1 + len(spec.steps) + (spec.close is not None) if endpoint else 0
    )  # a multi-step target's requests
    endpoint_calls = 2 * request.trials * per_trial
    exact = endpoint or not any(
        [request.mechanism.temperature != 1.0, stand_in.generated_tokens, setup.mechanism.needs_embedder]
    )
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
        per = rates.endpoint_seconds_per_call
        seconds = None if per is None else rates.endpoint_fixed_seconds + per * endpoint_calls
    if seconds is None:
        notes.append("no finished audit on this deployment to measure its throughput from")
    power = _power(request, setup.mechanism.gaussian, claimed, max_trials)
    return {
        "kind": "mia",
        "calls": {"model": model_calls, "endpoint": endpoint_calls, "exact": exact},
        "tokens": {
            "prompt": prompt_tokens,
            "generated": stand_in.generated_tokens if setup.mechanism.needs_llm else None,
        },
        "time": {
            "expected_seconds": seconds,
            "compute_seconds": sim,
            "model_seconds_per_call": rates.model_seconds_per_call if model_calls else None,
            "endpoint_seconds_per_call": rates.endpoint_seconds_per_call if endpoint_calls else None,
            "fixed_seconds": rates.endpoint_fixed_seconds if endpoint_calls else rates.model_fixed_seconds,
            "basis": rates.basis,
        },
        "power": {
            "trials": request.trials,
            "llm_calls": request.llm_calls,
            "estimator": request.estimator,
            **power,
        },
        "notes": notes,
    }
