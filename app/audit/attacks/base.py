"""An attack's audit query: the prompt every partition sees, the answers voted over, and which
answer means "canary present" (003 §3.2; 002 §3.1)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from app.audit.icl.contexts import format_context
from app.audit.icl.prompts import SYSTEM_CONTEXT, fill
from app.datasets.types import Dataset, Example
from app.engines.protocol import Prompt


class AttackOptions(Protocol):
    """The request's `attack` object as the attacks read it."""

    threat_model: str
    signal_texts: tuple[str, str] | None
    variant: str


@dataclass(frozen=True)
class AuditQuery:
    """`template` is filled with `fields` and the partition's `{context}` (or, with
    `context_in_system`, the context goes into the system prompt, 002 §3). `injected` exemplars are
    appended to every partition's context (brainwash). `answers[positive]` = canary present;
    `negative` is the answer compared against in the white-box score (None = strongest other).
    `view` tells ESA how to score its release: "signal" (003 §3.4), "repeat" (003 Prompt 5),
    "reference" (002 App. D, with `calibration` = the exemplars of the auditor's own "canary
    present" calibration prompt) or "output_only" (002 App. E.1). `prefill` is the start of the
    assistant's answer the attack writes itself (the canary's prefix, so the model continues it);
    `prefill_ids` are its token ids for the engine in use (`Prompt.continuation`; empty = no prefill,
    e.g. for an engine without a tokenizer). `other_weight` w is private voting's white-box score
    Ṽ_positive − w·Ṽ_negative: 1 = 003 §3.2's Ṽ_yes − Ṽ_no, 0 = Ṽ_positive alone (the `*_count`
    attacks, app/audit/attacks/count_score.py). How the teachers answer is the mechanism's
    (`mechanism.teacher_output`), not the query's."""

    template: str
    answers: tuple[str, ...]
    positive: int = 0
    negative: int | None = 1
    fields: dict[str, str] = field(default_factory=dict)
    context_in_system: bool = False
    injected: tuple[Example, ...] = ()
    signal_texts: tuple[str, str] | None = None
    view: str = "signal"
    calibration: tuple[Example, ...] = ()
    prefill: str = ""
    prefill_ids: tuple[int, ...] = ()
    other_weight: float = 1.0

    def prompt(self, exemplars: Sequence[Example]) -> Prompt:
        context = format_context([*exemplars, *self.injected])
        if self.context_in_system:
            return Prompt(
                fill(self.template, **self.fields),
                system=fill(SYSTEM_CONTEXT, context=context),
                continuation=self.prefill_ids,
            )
        return Prompt(fill(self.template, context=context, **self.fields), continuation=self.prefill_ids)


class BuildQuery(Protocol):
    """An attack's `build_query`: the audit query for one canary (each attack module defines one)."""

    def __call__(
        self, *, canary: Example, dataset: Dataset, spec: Any, rng: np.random.Generator
    ) -> AuditQuery: ...
