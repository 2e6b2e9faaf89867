"""Plain ICL behind a system-prompt defense, levels 1–3 (002 §3.2, texts in App. B.1).

The defense follows the exemplars in the system prompt (002: SP_P = (E_1, …, E_N + P) + Q); when
the audit query carries the context in the user text, the defense is the whole system prompt.
No ε: leakage only.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from app.audit.icl.prompts import DEFENSES
from app.audit.mechanisms.plain import PlainICL
from app.audit.runtime import AuditError
from app.engines.protocol import Prompt


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

    def wrap(self, prompt: Prompt) -> Prompt:
        system = f"{prompt.system}\n\n{self.defense}" if prompt.system else self.defense
        return replace(prompt, system=system)
