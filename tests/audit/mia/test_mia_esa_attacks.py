"""The generation attacks on ESA with real MiniLM embeddings and oracle answers (samsum)."""

from __future__ import annotations

import pytest

from app.audit.kinds import mia


@pytest.mark.slow
def test_esa_attacks_rank_as_the_papers_report(oracle_ctx, minilm) -> None:
    """003 §4.3: repeat is blind in the black box (the release is a zero-shot candidate); 002 App. D/E.1:
    the reference vector sees ẽ and leaks about as much as the signal-text score, the output-only
    distance far less. None exceeds ε_theory."""
    oracle_ctx.engines.embed = minilm
    eps = {}
    for attack in ("signal_text", "repeat", "reference_vector", "output_only"):
        body = {
            "kind": "mia",
            "dataset": "samsum",
            "model": "oracle",
            "epsilon": 8.0,
            "trials": 20_000,
            "mechanism": {"name": "esa", "calibration": "analytic"},
            "attack": {"name": attack},
        }
        r = mia.run(mia.Request.model_validate(body), oracle_ctx).stored()
        assert not r["violation"]
        eps[attack] = (r["black_box"]["epsilon_empirical"], r["white_box"]["epsilon_empirical"])
    assert eps["repeat"][0] == 0.0
    assert eps["reference_vector"][1] >= 0.9 * eps["signal_text"][1] > 2.0
    assert eps["output_only"][1] < 0.5 * eps["reference_vector"][1]
