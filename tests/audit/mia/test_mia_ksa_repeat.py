"""KSA with the rare-word attack, and the repeat attack, audited with the oracle engine."""

from __future__ import annotations

import numpy as np
import pytest

from app.audit.attacks.several_canaries import split_canary
from app.audit.icl import prompts
from app.audit.kinds import mia
from app.audit.mechanisms.ksa import keywords
from app.engines.oracle import OracleEngine


def audit(ctx, **body):
    return mia.run(
        mia.Request.model_validate({"kind": "mia", "dataset": "ag_news", "model": "oracle", **body}), ctx
    ).stored()


def ksa(ctx, max_words: int) -> dict:
    return audit(
        ctx,
        seed=3,
        epsilon=2.0,
        trials=100_000,
        mechanism={"name": "ksa", "calibration": "analytic", "max_words": max_words},
        attack={"name": "ksa_rare_word"},
    )


def test_ksa_rare_word_is_tight_with_one_keyword_per_output(oracle_ctx) -> None:
    """max_words = 1: Δ₂ = √2 is attained (rare word +1, common word −1), like private voting."""
    r = ksa(oracle_ctx, 1)
    assert r["sensitivity"] == pytest.approx(np.sqrt(2))
    assert 0.9 <= r["white_box"]["epsilon_empirical"] / 2.0 <= 1.0
    assert r["black_box"]["epsilon_empirical"] > 1.0 and not r["violation"]


def test_ksa_sensitivity_bound_leaves_slack_when_outputs_are_one_word(oracle_ctx) -> None:
    """max_words = 4 calibrates for Δ₂ = √8 but one-word answers move the counts by √2 only: μ halves."""
    r = ksa(oracle_ctx, 4)
    assert r["white_box"]["epsilon_empirical"] < 0.6 * r["epsilon_theory"] and not r["violation"]


def test_keywords_drop_stop_words_and_repeats() -> None:
    assert keywords("The zyzzyva and THE Zyzzyva ate the ordinary leaf.") == [
        "zyzzyva",
        "ate",
        "ordinary",
        "leaf",
    ]
    assert keywords("The zyzzyva ate the ordinary leaf.", 2) == ["zyzzyva", "ate"]


def test_oracle_completes_the_repeat_prefix_from_the_context() -> None:
    prefix, rest = split_canary("Wall St. Bears Claw Back Into the Black")
    assert (prefix, rest) == ("Wall St. Bears Claw", "Back Into the Black")
    oracle = OracleEngine()
    context = "Text: Wall St. Bears Claw Back\n  Into the Black\nLabel: Business\n\nText: other"
    present = prompts.fill(prompts.REPEAT, context=context, prefix=prefix)
    absent = prompts.fill(prompts.REPEAT, context="Text: other", prefix=prefix)
    lp = oracle.label_logprobs([present, absent], [rest, prompts.REPEAT_NOT_FOUND])
    assert lp.tolist() == [[0.0, -np.inf], [-np.inf, 0.0]]


def test_repeat_leaks_fully_from_plain_icl(oracle_ctx) -> None:
    r = audit(oracle_ctx, trials=10_000, mechanism={"name": "none"}, attack={"name": "repeat"})
    assert r["black_box"]["tpr"] == 1.0 and r["black_box"]["fpr"] == 0.0
    assert r["epsilon_theory"] is None
