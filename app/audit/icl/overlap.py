"""How much of a record's secret a released text carries: ROUGE-L F1 and exact match.

Texts are compared as sequences of lower-case alphanumeric tokens (`tokens`), as ROUGE's default
tokenizer does (Lin 2004, without stemming). ROUGE-L (Lin 2004 §3.1, eqs. 2–4 with β = 1):
with L = |LCS(candidate, reference)|, P = L/|candidate|, R = L/|reference|, F1 = 2PR/(P + R)
(0 when L = 0). `exact` = 1 iff the reference's token sequence occurs contiguously in the candidate
(the whole secret was released, possibly inside a longer answer). Both are functions of the released
text only, i.e. post-processing: they can be used as a black-box membership score.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_TOKEN = re.compile(r"[a-z0-9]+")


def tokens(text: str) -> list[str]:
    """Lower-case alphanumeric tokens of `text` (punctuation and hyphens split)."""
    return _TOKEN.findall(text.lower())


def lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    """Length of the longest common subsequence (dynamic programming, O(|a|·|b|))."""
    if not a or not b:
        return 0
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


def rouge_l(candidate: str, reference: str) -> float:
    """ROUGE-L F1 of `candidate` against `reference` (module docstring)."""
    c, r = tokens(candidate), tokens(reference)
    common = lcs_length(c, r)
    if common == 0:
        return 0.0
    precision, recall = common / len(c), common / len(r)
    return 2 * precision * recall / (precision + recall)


def exact(candidate: str, reference: str) -> float:
    """1.0 iff the reference's tokens occur contiguously in the candidate's, else 0.0."""
    c, r = tokens(candidate), tokens(reference)
    if not r:
        return 0.0
    return float(any(c[i : i + len(r)] == r for i in range(len(c) - len(r) + 1)))


SCORES = {"rouge_l": rouge_l, "exact": exact}
