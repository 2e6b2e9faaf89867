"""Per-record risk: which of an audit's canaries leak, each with its own evidence.

An audit over several canaries (records) gives each record its own paired trials: trial t of C1 and
trial t of C0 share the record, its context and the call (attacks/likelihood.py). Per record:

- score statistics of both sides and the mean paired gap d_t = s_in,t − s_out,t;
- `auc` = P(s_in > s_out) + ½ P(=) over the record's trials;
- `p_value` of the exact one-sided sign test on the gaps (H0: a gap is as likely negative as positive,
  which holds when the record's presence does not change its score's law — ε = 0 for that record);
- `epsilon_lower`: the record's own ε lower bound at the audit's confidence, with the threshold chosen
  by the Bonferroni rule over C0 order statistics (thresholds.Bonferroni: valid without a held-out split,
  which the few trials of one record cannot afford). It holds for each record on its own, not for all
  records simultaneously;
- `flagged`: p_value ≤ (1 − confidence)/n_records — Bonferroni over the records, so the chance that any
  non-leaking record is flagged is at most 1 − confidence. The smallest p of c gaps is 2^−c, so a flag
  needs c ≥ log₂(n_records / (1 − confidence)) contexts per record (9 for 20 records at 95 %); below that
  the result's `next_steps` names the contexts that would let one fire (stats/next_steps.py).

Rows are sorted by risk (p-value, then ε lower bound, descending), `rank` 1 = the record that leaks most.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from scipy import stats

if TYPE_CHECKING:
    from app.audit.stats.bounds import Assumption

COLUMNS = (
    "rank",
    "record_id",
    "trials",
    "score_in_mean",
    "score_out_mean",
    "score_in_std",
    "score_out_std",
    "gap_mean",
    "auc",
    "epsilon_lower",
    "p_value",
    "flagged",
    "record_hash",
    "text",
)


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def paired_p_value(scores_in: np.ndarray, scores_out: np.ndarray) -> float:
    """One-sided exact sign test of the gaps d = s_in − s_out: P[Bin(n, ½) ≥ n₊] with n the non-zero gaps
    and n₊ the positive ones (1.0 when every gap is 0). Valid whenever, without leakage, a gap is as
    likely negative as positive — no assumption on the scores' law (ties, heavy tails, discrete votes)."""
    gaps = np.asarray(scores_in, float) - np.asarray(scores_out, float)
    n, positive = int(np.count_nonzero(gaps)), int(np.count_nonzero(gaps > 0))
    return 1.0 if n == 0 else float(stats.binom.sf(positive - 1, n, 0.5))


def record_table(
    records: Sequence[dict],
    scores_in: np.ndarray,
    scores_out: np.ndarray,
    record_of_trial: np.ndarray,
    *,
    confidence: float,
    delta: float,
    assumption: Assumption,
) -> list[dict]:
    """One row per record (see the module docstring), riskiest first."""
    from app.audit.stats.bounds import verdict_epsilon
    from app.audit.stats.thresholds import Bonferroni, auc, bound_from_scores

    alpha = (1 - confidence) / max(1, len(records))
    rows = []
    for r, record in enumerate(records):
        mask = record_of_trial == r
        s_in, s_out = scores_in[mask], scores_out[mask]
        bound = bound_from_scores(
            s_in, s_out, strategy=Bonferroni(), confidence=confidence, delta=delta, assumption=assumption
        )
        p = paired_p_value(s_in, s_out)
        rows.append(
            {
                "record_id": record["record_id"],
                "text": record.get("text"),
                "trials": int(mask.sum()),
                "score_in_mean": _finite(np.mean(s_in)),
                "score_out_mean": _finite(np.mean(s_out)),
                "score_in_std": _finite(np.std(s_in)),
                "score_out_std": _finite(np.std(s_out)),
                "gap_mean": _finite(np.mean(s_in - s_out)),
                "auc": float(auc(s_in, s_out)),
                "epsilon_lower": _finite(verdict_epsilon(bound, assumption)),
                "p_value": p,
                "flagged": p <= alpha,
            }
        )
    rows.sort(key=lambda row: (row["p_value"], -(row["epsilon_lower"] or 0.0), -row["auc"]))
    for rank, row in enumerate(rows, start=1):
        row["rank"] = rank
    return rows


def records_csv(rows: Sequence[dict]) -> str:
    """The per-record table as CSV (columns `COLUMNS`)."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in COLUMNS})
    return buffer.getvalue()
