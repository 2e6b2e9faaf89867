"""`next_steps`: what would make an audit answer (app/audit/stats/next_steps.py computes them)."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field

from app.audit.results.part import ResultPart


class NextStep(ResultPart):
    """One computed next step of a result: the request fields to change and what the change buys."""

    model_config = ConfigDict(extra="allow")

    why: str = Field(
        description="What it answers: under-powered, no usable signal, stopped by budget.<cap>, per-record "
        "flags cannot fire, in-sample threshold, canary in no partition, nothing allowed, inconclusive."
    )
    set: dict[str, Any] | None = Field(
        description="The request fields to set, by dotted path (`trials`, `attack.contexts`, "
        "`budget.max_calls`, `mechanism.teacher_output`, `model`, …), with their values; null when no field "
        "of the request does it (a bound's trials are the data given)."
    )
    epsilon_detectable: float | None = Field(
        default=None,
        description="The verdict's power model's ε_detectable once the step is taken (same tests, efficiency "
        "and confidence, the trials scaled); null when it cannot be known before the run.",
    )
    seconds: float | None = Field(
        default=None,
        description="The rerun's expected wall time: this run's seconds scaled with its trials where calls "
        "made per trial are its cost (direct, several canaries, on a model or endpoint); null when not known "
        "here.",
    )
    text: str = Field(description="The step in one line, for people.")
