"""End-to-end membership audits with the oracle engine (the mechanism's worst case, 003 Lemma 3.1)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from scipy import stats

from app.audit.kinds import mia


def audit(ctx, **body):
    mechanism = {"name": "private_voting", **body.pop("mechanism", {})}  # stated: no default any more
    body = {"kind": "mia", "dataset": "ag_news", "model": "oracle", **body, "mechanism": mechanism}
    return mia.run(mia.Request.model_validate(body), ctx).stored()


@pytest.mark.parametrize("epsilon", [1, 2, 4, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_white_box_analytic_audit_is_tight(oracle_ctx, epsilon, seed) -> None:
    """003 Fig. 5: ε_emp/ε_theory ≥ 0.9, T = 4, 400K trials, split threshold, on every seed tried."""
    r = audit(
        oracle_ctx,
        seed=seed,
        epsilon=epsilon,
        mechanism={"calibration": "analytic"},
        attack={"threat_model": "white_box"},
    )
    assert r["epsilon_ceiling"] == pytest.approx(epsilon, rel=1e-6)
    assert r["white_box"]["epsilon_empirical"] / epsilon >= 0.9
    assert r["white_box"]["mu_lower"] <= r["mu_theory"]
    assert r["llm_forward_passes"] == 5  # T + 1 distinct prompts


def test_classic_calibration_is_looser_than_claimed(oracle_ctx) -> None:
    r = audit(oracle_ctx, epsilon=4.0, trials=100_000)
    assert r["epsilon_ceiling"] == pytest.approx(3.51, abs=0.01)
    assert r["white_box"]["epsilon_empirical"] <= r["epsilon_ceiling"] and not r["violation"]


def test_correct_mechanism_is_not_flagged_in_repeated_audits(oracle_ctx) -> None:
    """Analytic σ (ceiling = claim): flagged in at most the confidence's share (+ binomial slack)."""
    runs = 30
    flagged = sum(
        audit(oracle_ctx, seed=s, epsilon=2.0, trials=20_000, mechanism={"calibration": "analytic"})[
            "violation"
        ]
        for s in range(runs)
    )
    assert flagged <= stats.binom.ppf(0.999, runs, 0.05)


def test_black_box_falls_as_partitions_grow(oracle_ctx) -> None:
    eps = [
        audit(
            oracle_ctx, epsilon=4.0, trials=100_000, mechanism={"partitions": t, "calibration": "analytic"}
        )["black_box"]["epsilon_empirical"]
        for t in (2, 8, 32)
    ]
    assert eps[0] > eps[1] > eps[2]


def test_bootstrap_and_direct_agree(oracle_ctx) -> None:
    body = {"epsilon": 2.0, "trials": 20_000, "attack": {"threat_model": "black_box"}}
    boot, direct = audit(oracle_ctx, **body), audit(oracle_ctx, estimator="direct", **body)
    for key in ("tpr", "fpr"):
        b, d = boot["black_box"][key], direct["black_box"][key]
        assert abs(b - d) < 4 * (b * (1 - b) * 2 / 20_000) ** 0.5
    exact = audit(oracle_ctx, estimator="exact", **body)
    assert exact["black_box"]["tpr"] == pytest.approx(boot["black_box"]["tpr"], abs=0.01)


def test_plain_icl_and_prompt_defense_leak_fully_to_the_oracle(oracle_ctx) -> None:
    for mech in ({"name": "none"}, {"name": "prompt_defense", "defense_level": 3}):
        r = audit(oracle_ctx, mechanism=mech, trials=10_000, attack={"name": "canary_prompt"})
        assert r["black_box"]["tpr"] == 1.0 and r["black_box"]["fpr"] == 0.0
        assert r["epsilon_theory"] is None and r["violation"] is False
        assert r["canary"] == "The sun rises in the west."


def test_same_seed_same_result(oracle_ctx) -> None:
    assert audit(oracle_ctx, seed=4, trials=5_000) == audit(oracle_ctx, seed=4, trials=5_000)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"epsilon": 0}, "epsilon"),
        ({"delta": 1.0}, "delta"),
        ({"mechanism": {"name": "nope"}}, "mechanism.name"),
        ({"attack": {"name": "nope"}}, "attack.name"),
        ({"mechanism": {"name": "private_voting", "bug": "nope"}}, "mechanism.bug"),
        ({"mechanism": {"name": "esa"}, "attack": {"name": "inquiry"}}, "attack.name"),
    ],
)
def test_invalid_requests_name_the_field(body, field) -> None:
    with pytest.raises(ValidationError) as err:
        mia.Request.model_validate(
            {"kind": "mia", "dataset": "ag_news", "mechanism": {"name": "private_voting"}} | body
        )
    assert field.split(".")[-1] in str(err.value)


def test_progress_stages_in_order(oracle_ctx) -> None:
    seen = []
    oracle_ctx.progress = lambda stage, fraction, message="": seen.append(stage)
    audit(oracle_ctx, trials=120_000)
    stages = list(dict.fromkeys(seen))
    assert stages == ["collect C1", "collect C0", "simulate", "bound"]
