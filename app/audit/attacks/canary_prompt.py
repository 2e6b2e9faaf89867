"""ContextLeak canary prompts (002 §3.3, App. A.3): the context sits in the system prompt and the user
asks for "1" if the canary statement is present, "0" otherwise (or, with signal texts "list", for the
statement in a python list vs `[]`, = 003 Prompt 6). Default canary: "The sun rises in the west."
"""

from __future__ import annotations

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.prompts import (
    CANARY_BINARY,
    CANARY_BINARY_ANSWERS,
    CANARY_LIST,
    CONTEXTLEAK_CANARY,
    canary_list_answers,
)
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"private_voting", "none", "prompt_defense", "http_endpoint"})
DEFAULT_CANARY = CONTEXTLEAK_CANARY  # 002's canary text when the request gives none


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    if spec.variant == "list":
        answers = canary_list_answers(canary.text)
        return AuditQuery(CANARY_LIST, answers, fields={"canary": canary.text}, context_in_system=True)
    return AuditQuery(
        CANARY_BINARY, CANARY_BINARY_ANSWERS, fields={"canary": canary.text}, context_in_system=True
    )
