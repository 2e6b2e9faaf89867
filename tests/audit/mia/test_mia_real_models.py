"""Membership audits with the real MiniLM embedder and the real SmolLM2 (slow)."""

from __future__ import annotations

import pytest

from app.audit.kinds import mia


@pytest.mark.slow
def test_esa_with_minilm_stays_below_theory(oracle_ctx, minilm) -> None:
    """003 §4.3: ESA's sensitivity 2/T is rarely attained by real embeddings, so ε_emp < ε_theory."""
    oracle_ctx.engines.embed = minilm
    body = {
        "kind": "mia",
        "dataset": "samsum",
        "model": "oracle",
        "epsilon": 8.0,
        "trials": 50_000,
        "mechanism": {"name": "esa", "calibration": "analytic"},
        "attack": {"name": "signal_text"},
    }
    r = mia.run(mia.Request.model_validate(body), oracle_ctx).stored()
    assert 0 < r["white_box"]["epsilon_empirical"] < r["epsilon_theory"]
    assert not r["violation"]


@pytest.mark.slow
def test_smollm2_private_voting_end_to_end(oracle_ctx, smollm2) -> None:
    """SmolLM2-135M is a weak inquirer: at ε = 8 it leaks far less than the oracle (measured ε_emp = 0)."""
    oracle_ctx.engines.llms["smollm2"] = smollm2
    body = {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "smollm2",
        "epsilon": 8.0,
        "trials": 20_000,
        "mechanism": {"name": "private_voting", "partitions": 4, "shots_per_partition": 1},
    }
    r = mia.run(mia.Request.model_validate(body), oracle_ctx).stored()
    assert r["distinct_prompts"] == 5
    assert r["white_box"]["epsilon_empirical"] <= r["epsilon_ceiling"] and not r["violation"]
