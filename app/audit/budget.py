"""Budgets: `budget: {max_calls, max_tokens, max_seconds}` on an audit, counted as it runs.

Kinds: mia, iclinf and synthetic_generation take one (`with_budget` shows the spend at every progress
report), and the operator's ICLAUDIT_DEFAULT_BUDGET is the same budget stored with the request; `bound`
makes no call, so it takes none (a budget there is a 422).

Calls are the model's distinct prompts (each goes to the engine once) and an endpoint's calls; tokens the
engine's prompt and generated tokens; seconds the audit's wall time since its computation began. The
meter is checked before every model call, endpoint trial and progress report: the call that would pass
`max_calls` is not made; `max_tokens` and `max_seconds` are seen after the call that passed them, and the
audit stops before the next. Every cap stops an audit the same way: it keeps what it finished — an mia
audit its trials, C1 and C0 in pairs (an endpoint's are kept one by one as they are answered, so a stop
wastes at most the calls in flight), an iclinf audit its queries, a synthetic_generation audit its texts —
and is judged on them (`inconclusive`, reason budget, unless they already show a violation:
`stopped_verdict`), with `result.stopped` and `result.spent`. Once the spending is over (`Meter.settle`),
the computation left (bounds, verdict) finishes whatever the clock says: it makes no call. Only an audit
that finished nothing (no trial on one side) fails, with the cap and the final spend in its error
(`Meter.unfinished`). Messages that go into a result name the cap, never the wall time spent, so two
identical stops read alike; `result.spent` holds the numbers.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from app.audit.runtime import AuditError, RunContext


class BudgetSpec(BaseModel):
    """Caps on what one audit may spend; absent fields are not capped. Taken by the kinds that call a model
    or an endpoint (mia, iclinf, synthetic_generation); a bound audit calls nothing, so a budget in its
    request is a 422 at $.budget."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_calls: int | None = Field(default=None, ge=1, description="Model prompts plus endpoint calls.")
    max_tokens: int | None = Field(default=None, ge=1, description="Model prompt + generated tokens.")
    max_seconds: float | None = Field(default=None, gt=0, le=7 * 24 * 3600, description="Wall time.")


class BudgetExhausted(AuditError):
    """A cap was reached; `cap` names it (max_calls, max_tokens, max_seconds). Its message names the cap
    only (`budget: max_calls = 250 reached`, the same for two identical stops), plus `detail`; what was
    spent is read from the meter once the calls in flight are back (`Meter.as_dict`, `Meter.unfinished`).
    `partial`: what a mechanism finished before the stop, for the trials loop to keep (stats/trials.py)."""

    def __init__(self, cap: str, limit: float, detail: str = "") -> None:
        super().__init__(f"budget: {cap} = {limit:g} reached{detail}")
        self.cap = cap
        self.limit = limit
        self.partial: Any = None


@dataclass
class Meter:
    """What one audit has spent against its budget (`spec` None: only counted)."""

    spec: BudgetSpec | None = None
    calls: int = 0
    tokens: int = 0
    started: float = field(default_factory=time.monotonic)
    settled: bool = False  # the spending is over: progress reports no longer stop the audit

    def spent(self) -> dict[str, float]:
        return {"calls": self.calls, "tokens": self.tokens, "seconds": time.monotonic() - self.started}

    def seconds_left(self) -> float | None:
        """Wall seconds left under max_seconds (None: no such cap)."""
        if self.spec is None or self.spec.max_seconds is None:
            return None
        return self.spec.max_seconds - (time.monotonic() - self.started)

    def check(self, calls: int = 0) -> None:
        """BudgetExhausted if `calls` more would pass max_calls, or tokens or seconds are spent. Once
        `settled`, a check for no call (a progress report) passes: what is left makes no call."""
        if self.spec is None or (self.settled and calls == 0):
            return
        spec = self.spec
        if spec.max_calls is not None and self.calls + calls > spec.max_calls:
            raise BudgetExhausted("max_calls", spec.max_calls)
        if spec.max_tokens is not None and self.tokens >= spec.max_tokens:
            raise BudgetExhausted("max_tokens", spec.max_tokens)
        left = self.seconds_left()
        if left is not None and left <= 0:
            raise BudgetExhausted("max_seconds", spec.max_seconds or 0)

    def settle(self) -> None:
        """The audit's calls are over (finished or stopped): the bounds and verdict that follow finish."""
        self.settled = True

    def unfinished(self, stop: BudgetExhausted, nothing: str) -> BudgetExhausted:
        """The error of an audit `stop` ended before it finished anything (`nothing`: "a trial on each
        side"), with what it spent, read now that no call is in flight."""
        return BudgetExhausted(
            stop.cap,
            stop.limit,
            f" before the audit finished {nothing} (spent: calls {self.calls}, tokens {self.tokens})",
        )

    def charge(self, calls: int = 0, tokens: int = 0) -> None:
        self.calls += calls
        self.tokens += tokens

    def summary(self) -> str:
        """`calls 120/500, tokens 0, 3.2/60 s`: the spend against each cap, for progress messages."""
        spec, spent = self.spec or BudgetSpec(), self.spent()

        def part(name: str, value: float, cap: float | None, unit: str = "") -> str:
            shown = f"{value:.1f}" if isinstance(value, float) and name == "" else f"{value:g}"
            return f"{name}{shown}{'/' + format(cap, 'g') if cap is not None else ''}{unit}"

        return ", ".join(
            [
                part("calls ", spent["calls"], spec.max_calls),
                part("tokens ", spent["tokens"], spec.max_tokens),
                part("", round(spent["seconds"], 1), spec.max_seconds, " s"),
            ]
        )

    def as_dict(self) -> dict[str, Any]:
        spent = self.spent()
        return {
            "budget": self.spec.model_dump() if self.spec is not None else None,
            "spent": {"calls": self.calls, "tokens": self.tokens, "seconds": round(spent["seconds"], 3)},
        }


class MeteredEngine:
    """An engine whose calls are checked against and charged to a Meter (calls = prompts sent: the
    CleanSource in front sends each distinct prompt once; tokens from the engine's own counters)."""

    def __init__(self, engine: Any, meter: Meter) -> None:
        self._engine = engine
        self._meter = meter

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if name not in ("label_logprobs", "generate", "next_token_logprobs"):
            return attr

        def metered(prompts: Any, *args: Any, **kwargs: Any) -> Any:
            self._meter.check(calls=len(prompts))
            counters = self._engine.counters
            before = counters.prompt_tokens + counters.generated_tokens
            try:
                return attr(prompts, *args, **kwargs)
            finally:
                after = counters.prompt_tokens + counters.generated_tokens
                self._meter.charge(calls=len(prompts), tokens=after - before)

        return metered


def with_budget(ctx: RunContext, budget: BudgetSpec | None) -> tuple[RunContext, Meter]:
    """`ctx` whose progress reports check the budget and show the spend against it (`calls 120/500, …`),
    and the meter that counts it; without a budget `ctx` itself and a meter that only counts."""
    import dataclasses

    meter = Meter(budget)
    if budget is None:
        return ctx, meter
    report = ctx.progress

    def progress(stage: str, fraction: float, message: str = "") -> None:
        meter.check()
        report(stage, fraction, f"{message} · {meter.summary()}" if message else meter.summary())

    return dataclasses.replace(ctx, progress=progress), meter


def stopped(stop: BudgetExhausted, **finished: int) -> dict:
    """`result.stopped` of an audit a cap stopped: reason, cap, message and what it finished (`trials=`,
    `queries=`, `texts=`)."""
    return {"reason": "budget", "cap": stop.cap, "message": str(stop), **finished}


def stopped_verdict(stop: BudgetExhausted, finished: str, judged: dict | None = None) -> dict:
    """The verdict fields of an audit a cap stopped, judged on what it `finished` ("3 of 50 queries"):
    `inconclusive` (budget), unless `judged` — the verdict of what was measured — is already a violation,
    which more calls could not undo."""
    if judged is not None and judged.get("verdict") == "violation":
        return judged
    reason = f"{stop}; measured on the {finished} it finished"
    return {
        "verdict": "inconclusive",
        "verdict_reason": reason,
        "headline": f"Inconclusive (budget): {reason}",
    }
