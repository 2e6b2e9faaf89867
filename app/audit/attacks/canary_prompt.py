"""ContextLeak canary prompts (002 §3.3, App. A.3): the context sits in the system prompt and the user
asks for "1" if the canary statement is present, "0" otherwise (or, with signal texts "list", for the
statement in a python list vs `[]`, = 003 Prompt 6). Default canary: "The sun rises in the west."

Variant "secret" (with `attack.score`, a multi-canary audit of generated text, attacks/released_text.py):
each record carries a secret — its first run of ≥ 5 digits (the record number of `synthetic_records`)
— and the user asks for the number that follows the text before it (`CANARY_SECRET`, the assistant's
answer prefilled with that text). The released answer is scored by exact match (or ROUGE-L) with the
secret; the white-box variant is the likelihood attack with `secret: "code"` (log p(secret | prompt)).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.prompts import (
    CANARY_BINARY,
    CANARY_BINARY_ANSWERS,
    CANARY_LIST,
    CANARY_SECRET,
    CONTEXTLEAK_CANARY,
    SECRET_NOT_FOUND,
    canary_list_answers,
)
from app.audit.runtime import AuditError
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset(
    {"private_voting", "none", "prompt_defense", "http_endpoint", "esa", "ksa", "synthetic_generation"}
)
DEFAULT_CANARY = CONTEXTLEAK_CANARY  # 002's canary text when the request gives none
_SECRET = re.compile(r"\d{5,}")


def record_secret(text: str) -> tuple[str, str]:
    """(handle, secret): the record's first run of ≥ 5 digits and the text before it."""
    found = _SECRET.search(text)
    if found is None or found.start() == 0:
        raise AuditError(
            'attack.variant "secret": a record needs a number of at least 5 digits after some text '
            f"(its secret); got {text[:60]!r}"
        )
    return text[: found.start()], found.group(0)


def secret_query(canary: Example) -> AuditQuery:
    """The secret query for one record; `answers[0]` is its secret."""
    handle, secret = record_secret(canary.text)
    return AuditQuery(
        CANARY_SECRET,
        (secret, SECRET_NOT_FOUND),
        fields={"handle": handle},
        context_in_system=True,
        signal_texts=(secret, SECRET_NOT_FOUND),
        view="repeat",
        prefill=handle,
    )


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    if spec.variant == "secret":
        return secret_query(canary)
    if spec.variant == "list":
        answers = canary_list_answers(canary.text)
        return AuditQuery(CANARY_LIST, answers, fields={"canary": canary.text}, context_in_system=True)
    return AuditQuery(
        CANARY_BINARY, CANARY_BINARY_ANSWERS, fields={"canary": canary.text}, context_in_system=True
    )


def check_request(request: Any) -> None:
    from app.audit.attacks.released_text import check_generated

    secret = request.attack.variant == "secret"
    if secret != (request.attack.score is not None):
        raise ValueError(
            'attack.score: the canary_prompt variant "secret" is scored on the generated text '
            '(score "exact" or "rouge_l"), and only it takes a score'
        )
    if secret:
        check_generated(request)
    elif request.mechanism.name in ("esa", "ksa"):
        raise ValueError(f'attack.variant: canary_prompt audits {request.mechanism.name} with "secret" only')


def owns_audit(request: Any) -> bool:
    return request.attack.score is not None


def run_audit(request: Any, ctx: Any) -> dict:
    from app.audit.attacks.released_text import run_generated

    return run_generated(request, ctx, build_query)
