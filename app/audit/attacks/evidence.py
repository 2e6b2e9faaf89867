"""A small, bounded sample of what an audit saw, for a person to read (the result's `evidence`): the record, the
query, and the first trials of C1 (record in) beside C0 (record out) — the released answer and the attack's
score. Read from arrays the audit already drew, so no random stream moves and no number of the result changes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

MAX_TRIALS = 8  # trials per side
MAX_RECORDS = 4  # records of an audit over several canaries
MAX_CHARS = 600  # characters of a text


def cut(text: str | None, limit: int = MAX_CHARS) -> str | None:
    """`text` at most `limit` characters, an ellipsis marking a cut."""
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _number(x: Any) -> float | None:
    value = float(x)
    return value if math.isfinite(value) else None


def _side(
    decisions: np.ndarray | None, scores: np.ndarray | None, idx: np.ndarray, said: str | None
) -> list[dict]:
    """The trials `idx` of one side: the black-box output (a decision, "in" = the release gave the answer that
    says the record is there, or a score of the released text) and the white-box score."""
    out = []
    for i in idx[:MAX_TRIALS]:
        row: dict[str, Any] = {"trial": int(i)}
        if decisions is None:
            pass
        elif decisions.dtype == bool:
            row["decision"] = "in" if decisions[i] else "out"
            if said is not None:
                row["released"] = said if decisions[i] else "another answer"
        else:
            row["output"] = _number(decisions[i])
        row["score"] = _number(scores[i]) if scores is not None else None
        out.append(row)
    return out


def one_canary(
    *,
    canary: str,
    query: str | None,
    prompt_in: str | None,
    prompt_out: str | None,
    answers: Sequence[str],
    positive: int,
    trials: Any,
) -> dict:
    """Evidence of a one-canary audit: the canary, the query, the canary's partition prompt in C1 and C0, and the
    first trials of each side (`trials`: app.audit.stats.trials.TrialScores)."""
    said = answers[positive] if answers else None
    first_in = np.arange(min(MAX_TRIALS, len(trials.scores_in)))
    first_out = np.arange(min(MAX_TRIALS, len(trials.scores_out)))
    return {
        "answers": [cut(a, 80) for a in list(answers)[:MAX_TRIALS]],
        "positive_answer": cut(said, 80),
        "records": [
            {
                "record_id": "canary",
                "text": cut(canary),
                "query": cut(query),
                "prompt_in": cut(prompt_in, 2 * MAX_CHARS),
                "prompt_out": cut(prompt_out, 2 * MAX_CHARS),
                "c1": _side(trials.decisions_in, trials.scores_in, first_in, said),
                "c0": _side(trials.decisions_out, trials.scores_out, first_out, said),
            }
        ],
        "max_trials": MAX_TRIALS,
    }


def several_canaries(ranked: Sequence[dict], records: Sequence[dict], trials: Any) -> dict:
    """Evidence of an audit over several canaries: its riskiest `MAX_RECORDS` records (`ranked`, the per-record
    table), each with its secret and its first paired trials, C1 beside C0 (`trials.record` maps a trial to
    its record)."""
    index = {r["record_id"]: i for i, r in enumerate(records)}
    out = []
    for row in ranked[:MAX_RECORDS]:
        r = index[row["record_id"]]
        idx = np.flatnonzero(trials.record == r)
        record = records[r]
        out.append(
            {
                "record_id": row["record_id"],
                "text": cut(record.get("text")),
                "secret": cut(record.get("secret"), 80),
                "query": None,
                "c1": _side(trials.decisions_in, trials.scores_in, idx, None),
                "c0": _side(trials.decisions_out, trials.scores_out, idx, None),
            }
        )
    return {"answers": None, "positive_answer": None, "records": out, "max_trials": MAX_TRIALS}
