"""Plain ICL behind a system-prompt defense, levels 1–3 (002 §3.2, texts in App. B.1).

002 places the defense after the exemplars in the system prompt, SP_P = (E_1, …, E_N + P), and the
user turn holds only the query Q. `audit_inputs` does the same for every audit query: a query that
carries its context in the user text (003's templates) is sent with the exemplars moved into the
system prompt (`SYSTEM_CONTEXT`) and `CONTEXT_IN_SYSTEM` in the template's context slot; `wrap` then
appends the defense after them. No ε: leakage only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from app.audit.attacks.base import AuditQuery
from app.audit.icl.prompts import CONTEXT_IN_SYSTEM, DEFENSES
from app.audit.mechanisms.plain import PlainICL
from app.audit.runtime import AuditError
from app.datasets.types import Example
from app.engines.protocol import Prompt


def placed(query: AuditQuery) -> AuditQuery:
    """`query` with its exemplars in the system prompt (002 §3.2); unchanged if they are there already."""
    if query.context_in_system:
        return query
    return replace(query, context_in_system=True, fields={**query.fields, "context": CONTEXT_IN_SYSTEM})


class PromptDefense(PlainICL):
    name = "prompt_defense"

    @classmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> PromptDefense:
        return cls(level=spec.defense_level, temperature=spec.temperature)

    def __init__(self, *, level: int, temperature: float = 1.0) -> None:
        if level not in DEFENSES:
            raise AuditError(f"mechanism.defense_level must be one of {sorted(DEFENSES)}, got {level}")
        super().__init__(temperature=temperature)
        self.defense = DEFENSES[level]

    def audit_inputs(self, query: AuditQuery, parts: Sequence[tuple[Example, ...]]) -> list:
        """Each partition's prompt as 002 sends it: exemplars, then the defense, in the system prompt."""
        query = placed(query)
        return [self.wrap(query.prompt(p)) for p in parts]

    def wrap(self, prompt: Prompt) -> Prompt:
        """The defense after whatever the system prompt holds (the exemplars, under `audit_inputs`)."""
        system = f"{prompt.system}\n\n{self.defense}" if prompt.system else self.defense
        return replace(prompt, system=system)
