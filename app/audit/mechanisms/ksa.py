"""Keyword space aggregation, KSA (Wu et al. 2024; audited in 002 App. E.2).

Each partition's output is cut into words (lower case, stop words out — scikit-learn's English
list — and the first `max_words` distinct ones kept); the clean statistic is the count vector
c_w = #{t : w ∈ words(o_t)} over a public vocabulary W: the words of the zero-shot candidates and
of the attack's answers (a vocabulary read off the private outputs would itself leak; words
outside W are dropped). Release: c̃ = c + N(0, σ²I_|W|); the released keywords are the `keywords`
words with the largest noisy counts. One partition changes at most 2·max_words counts by 1, so
Δ₂ = √(2·max_words). White-box view: c̃.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np

from app.audit.attacks.base import AuditQuery
from app.audit.mechanisms.base import BinaryTarget, CleanSource, Mechanism, Release, Theory, calibrate
from app.audit.runtime import AuditError
from app.engines.protocol import Prompt

_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


def ksa_sensitivity(max_words: int) -> float:
    """Δ₂ = √(2·max_words): one partition's keyword set swaps at most max_words words for others."""
    return math.sqrt(2 * max_words)


@cache
def _stop_words() -> frozenset[str]:
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    return frozenset(ENGLISH_STOP_WORDS)


def keywords(text: str, max_words: int | None = None) -> list[str]:
    """The distinct non-stop words of `text` in order of appearance (the first `max_words`)."""
    stop = _stop_words()
    words = [w for w in dict.fromkeys(_WORD.findall(text.lower())) if w not in stop]
    return words if max_words is None else words[:max_words]


class KSA(Mechanism):
    name = "ksa"
    gaussian = True
    scales_noise = True

    @classmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> KSA:
        return cls(
            partitions=spec.partitions,
            theory=calibrate(
                epsilon, delta, spec.sensitivity or ksa_sensitivity(spec.max_words), spec.calibration
            ),
            temperature=spec.temperature,
            candidates=spec.candidates,
            max_new_tokens=spec.max_new_tokens,
            max_words=spec.max_words,
            keywords=spec.keywords,
            partitioning=spec.partitioning,
        )

    def __init__(
        self,
        *,
        partitions: int,
        theory: Theory,
        temperature: float = 1.0,
        candidates: int = 8,
        max_new_tokens: int = 32,
        max_words: int = 4,
        keywords: int = 1,
        partitioning: str = "disjoint",
    ) -> None:
        super().__init__(partitions=partitions, partitioning=partitioning, theory=theory)
        self.temperature = temperature
        self.n_candidates = candidates
        self.max_new_tokens = max_new_tokens
        self.max_words = max_words
        self.n_keywords = keywords
        self.vocabulary: list[str] = []

    def prepare(self, query: AuditQuery, source: CleanSource) -> None:
        """W = the words of `candidates` zero-shot outputs (no exemplars) and of the attack's answers."""
        (zero_shot,) = source.generations(
            [self.wrap(query.prompt(()))], self.n_candidates, self.temperature, self.max_new_tokens
        )
        words = [w for text in (*zero_shot, *query.answers) for w in keywords(text)]
        self.vocabulary = sorted(set(words))

    def binary_target(self, query: AuditQuery, source: CleanSource) -> BinaryTarget:
        """The rare word (first keyword of y1) against y0's first keyword, when it has one."""
        y1, y0 = query.signal_texts or query.answers[:2]
        rare, common = keywords(y1), keywords(y0)
        if not rare:
            raise AuditError(f"attack: the rare word {y1!r} is a stop word; KSA drops it")
        index = {w: i for i, w in enumerate(self.vocabulary)}
        negative = index[common[0]] if common and common[0] != rare[0] else None
        return BinaryTarget(positive=index[rare[0]], negative=negative)

    def collect(
        self,
        prompts: Sequence[Prompt],
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """`n_calls` clean count vectors (n_calls, |W|); call i counts each partition's i-th output."""
        outputs = source.generations(prompts, n_calls, self.temperature, self.max_new_tokens)
        index = {w: i for i, w in enumerate(self.vocabulary)}
        counts = np.zeros((n_calls, len(self.vocabulary)))
        for outs in outputs:
            for i, text in enumerate(outs):
                for w in keywords(text, self.max_words):
                    if w in index:
                        counts[i, index[w]] += 1.0
        return counts

    def release(self, clean: np.ndarray, rng: np.random.Generator) -> Release:
        """c̃ = c + N(0, σ²); `answer` (m, k): the indices of the k largest noisy counts."""
        noisy = clean + rng.normal(0.0, self.noise_sigma, size=clean.shape)
        k = min(self.n_keywords, noisy.shape[1])
        top = np.argpartition(-noisy, k - 1, axis=1)[:, :k]
        return Release(answer=top, white_box=noisy)

    def binary_view(self, release: Release, target: BinaryTarget) -> tuple[np.ndarray, np.ndarray]:
        """Black box: the rare word is among the released keywords. White box: c̃_rare − c̃_common
        (c̃_rare alone when y0 has no keyword in W)."""
        decision = (release.answer == target.positive).any(axis=1)
        score = release.white_box[:, target.positive]
        if target.negative is not None:
            score = score - release.white_box[:, target.negative]
        return decision, score
