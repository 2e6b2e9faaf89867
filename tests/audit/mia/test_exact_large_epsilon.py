"""The exact estimator at large ε (issue 18 §4, first defect).

FNR was computed as 1 − TPR: at large ε the TPR is within 10⁻¹⁰ of 1, the subtraction loses every digit
(or gives 0), the assumption-free ε of a correct (analytic σ) mechanism came out above its claim (seed 5003,
ε = 20: 20.0018, flagged), and from ε = 26 (analytic) or 20 (classic) an infinite ε_af or Φ⁻¹(1) = ∞ made
the result invalid JSON (the audit FAILED with INTERNAL). exact.py now takes every rate from its own tail.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from app.audit.kinds import mia
from app.audit.stats.bounds import assumption_free_epsilon
from app.audit.stats.exact import assumption_free_epsilon_log

EPSILONS = list(range(10, 101, 2))  # 46 claims


def _exact_audit(ctx, epsilon: float, calibration: str, seed: int) -> dict:
    body = {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "seed": seed,
        "epsilon": epsilon,
        "estimator": "exact",
        "assumption": "none",
        "mechanism": {"name": "private_voting", "partitions": 4, "calibration": calibration},
    }
    return mia.run(mia.Request.model_validate(body), ctx).stored()


@pytest.mark.parametrize("calibration", ["analytic", "classic"])
def test_exact_sweep_large_epsilon_never_overstates_and_always_serialises(oracle_ctx, calibration) -> None:
    """ε ∈ {10, 12, …, 100}, seed 5003: every result is valid JSON with finite numbers, and no bound exceeds
    the exact ε of the calibrated noise (`epsilon_ceiling`). Analytic σ is exactly (ε, δ)-DP, so none is
    flagged; classic σ is not DP at its claim above ε ≈ 8.4 (calibration_valid false, ceiling 10.39 at
    ε = 10), so there a violation is the right answer, but never one above the ceiling."""
    for epsilon in EPSILONS:
        result = _exact_audit(oracle_ctx, epsilon, calibration, seed=5003)
        json.dumps(result, allow_nan=False)  # raised "Out of range float values" from ε = 26 / 20
        ceiling = result["epsilon_ceiling"]
        for tm in ("black_box", "white_box"):
            bound = result[tm]
            for key in (
                "mu_lower",
                "epsilon_empirical",
                "epsilon_empirical_assumption_free",
                "epsilon_lower",
            ):
                assert bound[key] is not None and math.isfinite(bound[key]), (epsilon, tm, key, bound)
            assert bound["epsilon_lower"] <= ceiling * (1 + 1e-6), (
                epsilon,
                tm,
                bound["epsilon_lower"],
                ceiling,
            )
        if calibration == "analytic":
            assert result["calibration_valid"] is True
            assert result["violation"] is False, (epsilon, result["white_box"]["epsilon_lower"])
            for tm in ("black_box", "white_box"):
                assert result[tm]["violation"] is False
                assert result[tm]["epsilon_lower"] <= epsilon + 1e-9
            # the white-box test is optimal: the exact audit reaches the claim within 0.1 % (threshold grid)
            assert result["white_box"]["epsilon_lower"] >= epsilon * (1 - 1e-3)


def test_exact_seed_5003_epsilon_20_is_not_flagged(oracle_ctx) -> None:
    """The reported case: analytic σ at ε = 20 gave ε_lower 20.0018 and violation true."""
    result = _exact_audit(oracle_ctx, 20, "analytic", seed=5003)
    assert result["violation"] is False
    assert 19.99 < result["white_box"]["epsilon_lower"] <= 20.0


@pytest.mark.parametrize("seed", [5010, 5011, 5012])
def test_exact_other_seeds_analytic_within_claim(oracle_ctx, seed) -> None:
    for epsilon in (16, 30, 64):
        result = _exact_audit(oracle_ctx, epsilon, "analytic", seed=seed)
        json.dumps(result, allow_nan=False)
        assert result["violation"] is False, (seed, epsilon)
        assert result["white_box"]["epsilon_lower"] <= epsilon + 1e-9


def test_log_space_assumption_free_matches_bounds_and_survives_extremes() -> None:
    rng = np.random.default_rng(5020)
    fnr, fpr = rng.uniform(1e-4, 0.5, 200), rng.uniform(1e-4, 0.5, 200)
    delta = 1e-5
    logged = assumption_free_epsilon_log(np.log(fnr), np.log(fpr), np.log1p(-fpr), np.log1p(-fnr), delta)
    np.testing.assert_allclose(logged, assumption_free_epsilon(fnr, fpr, delta), rtol=1e-10, atol=1e-12)
    # FNR = 1e-30: 1 − FNR is exactly 1.0 in floating point; the exact ε is ln(1/1e-30) (TNR ≈ 1)
    eps = assumption_free_epsilon_log(np.log(1e-30), np.log(0.5), np.log(0.5), np.log1p(-1e-30), delta)
    assert math.isclose(float(eps), math.log((0.5 - delta) / 1e-30), rel_tol=1e-12)
    # FNR = e^-1000 underflows as a rate but not as a log rate: still finite
    eps = assumption_free_epsilon_log(-1000.0, np.log(1e-3), 0.0, 0.0, delta)
    assert math.isfinite(float(eps)) and math.isclose(float(eps), 1000.0 + math.log1p(-delta), rel_tol=1e-12)
    # rates at or below δ give no bound from their side
    assert (
        float(assumption_free_epsilon_log(np.log(0.5), np.log(0.5), np.log(delta), np.log(delta), delta)) == 0
    )
