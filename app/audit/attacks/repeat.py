"""Repeat attack (Wen et al. 2024; 003 §3.2 and Prompt 5, the black-box baseline for generation): give
the first half of the canary's words and ask for the rest.

Single canary (default, `attack.score` unset): member iff the released completion is nearer (in
embedding space) the canary's true continuation y1 than the "not found" answer y0; the white-box score
is −‖ẽ − emb(y1)‖. 003 §4.3 finds it blind under ESA: the release is a zero-shot candidate, and
zero-shot prompts never hold the canary.

Generated text (`attack.score` "rouge_l" or "exact"): a multi-canary audit (attacks/released_text.py)
whose query also prefills the assistant's answer with the prefix, so the model continues the canary;
the released continuation is scored by ROUGE-L F1 (or exact match) with the canary's second half.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.attacks.several_canaries import split_canary
from app.audit.icl.prompts import REPEAT, REPEAT_NOT_FOUND
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"esa", "ksa", "none", "prompt_defense", "synthetic_generation"})


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    prefix, rest = split_canary(canary.text)
    answers = (rest, REPEAT_NOT_FOUND)
    query = AuditQuery(REPEAT, answers, fields={"prefix": prefix}, signal_texts=answers, view="repeat")
    return replace(query, prefill=prefix) if getattr(spec, "score", None) else query


def check_request(request: Any) -> None:
    from app.audit.attacks.released_text import check_generated

    if request.attack.score is not None:
        check_generated(request)
    elif request.mechanism.name == "ksa":
        raise ValueError(
            'attack.score: the repeat attack audits ksa on generated text ("rouge_l" or "exact")'
        )


def owns_audit(request: Any) -> bool:
    return request.attack.score is not None


def run_audit(request: Any, ctx: Any) -> dict:
    from app.audit.attacks.released_text import run_generated

    return run_generated(request, ctx, build_query)
