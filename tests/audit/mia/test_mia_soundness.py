"""Soundness of the mia verdict (issue 9): seed tree, common random numbers, null audits on the simulated
engine, the randomized-response endpoint over HTTP, and each planted bug where it breaks DP.

Reduced grids of docs/results/soundness.py (which writes docs/results/soundness.md with the full counts).
"""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError
from scipy import stats

from app.audit.icl import prompts
from app.audit.kinds import mia
from app.audit.mechanisms.bugs import BUGS
from app.audit.runtime import AuditCancelled
from app.audit.seeds import STREAMS, SeedTree
from app.engines.registry import UnknownModel, get_model_info
from app.engines.simulated import SimulatedEngine, parse_simulated_name
from testkit.dp_icl_server import randomized_response, serve


def audit(ctx, **body) -> dict:
    mechanism = {"name": "private_voting", **body.pop("mechanism", {})}  # stated: no default any more
    request = {"kind": "mia", "dataset": "ag_news", "model": "simulated", "epsilon": 1.0, **body}
    return mia.run(mia.Request.model_validate({**request, "mechanism": mechanism}), ctx).stored()


def test_seed_tree_streams_are_distinct_and_reproducible() -> None:
    tree = SeedTree.from_seed(7)
    firsts = {name: tree.rng(name).random() for name in STREAMS}
    assert len(set(firsts.values())) == len(STREAMS)
    assert tree.rng("pool").random() == tree.rng("pool").random() == firsts["pool"]
    assert SeedTree.from_seed(7).integer("threshold") == tree.integer("threshold")
    assert SeedTree.from_seed(8).rng("pool").random() != firsts["pool"]


def test_simulated_engine_null_and_shift() -> None:
    present = prompts.fill(prompts.INQUIRY, context="Text: a\n\nText: the canary", canary="the canary")
    absent = prompts.fill(prompts.INQUIRY, context="Text: a\n\nText: b", canary="the canary")
    null = SimulatedEngine(params=parse_simulated_name("simulated:seed=3"))
    p_in, p_out = np.exp(null.label_logprobs([present, absent], ["Yes", "No"]))
    assert np.allclose(p_in, p_out) and np.isclose(p_in.sum(), 1.0) and 0 < p_in[0] < 1
    shifted = SimulatedEngine(params=parse_simulated_name("simulated:shift=0.4,seed=3"))
    s_in, s_out = np.exp(shifted.label_logprobs([present, absent], ["Yes", "No"]))
    assert np.allclose(s_out, p_out) and np.isclose(s_in[0], p_in[0] + 0.4 * (1 - p_in[0]))
    other_seed = SimulatedEngine(params=parse_simulated_name("simulated:seed=4"))
    assert not np.allclose(np.exp(other_seed.label_logprobs([absent], ["Yes", "No"]))[0], p_out)
    abstaining = SimulatedEngine(params=parse_simulated_name("simulated:shift=1,seed=3,valid=0.25"))
    a_in, a_out = np.exp(abstaining.label_logprobs([present, absent], ["Yes", "No"]))
    assert np.allclose(a_out, 0.25 * p_out) and np.allclose(a_in, [1.0, 0.0])  # 3/4 of votes invalid
    options = get_model_info("simulated:shift=0.2,alpha=0.5").options
    assert options == {"shift": 0.2, "alpha": 0.5, "seed": 0, "valid": 1.0}
    for bad in ("simulated:shift=2", "simulated:beta=1", "simulated:seed=x", "simulated:valid=0"):
        with pytest.raises(UnknownModel):
            get_model_info(bad)


def test_pools_share_every_partition_but_the_canarys(oracle_ctx) -> None:
    """Common random numbers: row i of the C1 and C0 pools differ by at most one moved vote."""
    body = {"kind": "mia", "dataset": "ag_news", "model": "simulated:shift=0.5", "seed": 2}
    body["mechanism"] = {"name": "private_voting", "partitions": 16}
    setup = mia._setup(mia.Request.model_validate(body), oracle_ctx)
    m, answers = setup.mechanism, setup.query.answers
    clean_in = m.collect(setup.prompts_in, answers, setup.source, 500, setup.seeds.rng("pool"))
    clean_out = m.collect(setup.prompts_out, answers, setup.source, 500, setup.seeds.rng("pool"))
    moved = np.abs(clean_in - clean_out).sum(axis=1)
    assert moved.max() <= 2 and 0 < (moved > 0).mean() < 1


NULL_AUDITS = 60


@pytest.mark.parametrize(
    "body",
    [
        {"llm_calls": 5, "mechanism": {"partitions": 64, "calibration": "analytic"}},
        {"estimator": "direct", "mechanism": {"partitions": 16, "calibration": "analytic"}},
        {
            "model": "simulated:shift=1,alpha=0.1",
            "llm_calls": 5,
            "mechanism": {"partitions": 4, "calibration": "analytic"},
        },
    ],
    ids=["null-bootstrap-T64-n5", "null-direct-T16", "near-claim-bootstrap-T4-n5"],
)
def test_correct_mechanism_is_flagged_at_most_at_the_stated_rate(oracle_ctx, body) -> None:
    """Null and near-claim (shift 1, near-deterministic votes) audits of correct private voting: the
    verdict errs at most at 5 % (+ binomial slack at 0.999); full grid in docs/results/soundness.md."""
    results = [audit(oracle_ctx, seed=s, trials=4_000, **body) for s in range(NULL_AUDITS)]
    flagged = sum(r["violation"] for r in results)
    assert flagged <= stats.binom.ppf(0.999, NULL_AUDITS, 0.05)
    r = results[0]
    assert r["assumption"] == "gdp" and r["confidence"]["per_test"] == pytest.approx(0.975)
    assert r["confidence"]["correction"] == "bonferroni" and r["calibration_valid"] is True


RR_AUDITS = 8
RR_CALLS = 60


def endpoint_audits(ctx, epsilon_true: float) -> list[dict]:
    with serve(randomized_response(epsilon=epsilon_true, seed=11)) as url:
        return [
            audit(
                ctx,
                seed=s,
                estimator="direct",
                trials=RR_CALLS,
                mechanism={
                    "name": "http_endpoint",
                    "endpoint": {"url": url + "/", "answer_path": "$.choices[0].text"},
                },
                attack={"name": "canary_prompt", "threat_model": "black_box"},
            )
            for s in range(RR_AUDITS)
        ]


def test_randomized_response_endpoint_verdicts(oracle_ctx) -> None:
    """(1, 0)-DP randomized response claimed at ε = 1 passes; a (3, 0)-DP one claimed at 1 is flagged.
    The GDP route would read ε ≈ 5.6 into the honest endpoint's rates (issue 9, item 1)."""
    honest = endpoint_audits(oracle_ctx, 1.0)
    assert all(r["assumption"] == "none" for r in honest)
    assert sum(r["violation"] for r in honest) <= stats.binom.ppf(0.999, RR_AUDITS, 0.05)
    assert np.mean([r["black_box"]["epsilon_empirical"] for r in honest]) > 2.0  # GDP: unsound here
    leaky = endpoint_audits(oracle_ctx, 3.0)
    assert sum(r["violation"] for r in leaky) >= 0.9 * RR_AUDITS


def test_requests_choose_the_assumption(oracle_ctx) -> None:
    r = audit(oracle_ctx, model="oracle", trials=4_000, assumption="none")
    for tm in ("black_box", "white_box"):
        assert r[tm]["assumption"] == "none"
        assert r[tm]["epsilon_empirical_assumption_free"] <= r[tm]["epsilon_empirical"] + 1e-9
        assert r[tm]["epsilon_lower"] == r[tm]["epsilon_empirical_assumption_free"]
    endpoint = {
        "name": "http_endpoint",
        "endpoint": {"url": "http://127.0.0.1:9/"},
    }
    with pytest.raises(ValidationError, match="assumption"):
        mia.Request.model_validate(
            {
                "kind": "mia",
                "dataset": "ag_news",
                "estimator": "direct",
                "assumption": "gdp",
                "mechanism": endpoint,
                "attack": {"name": "canary_prompt", "threat_model": "black_box"},
            }
        )


def test_classic_calibration_breach_is_reported_apart(oracle_ctx) -> None:
    """Classic σ at ε = 10 is really ε ≈ 10.39 at δ = 1e-5: a theory-level breach, reported beside the
    empirical verdict (which the oracle's exact audit confirms: it reaches the exact ε, above the claim)."""
    body = {"model": "oracle", "estimator": "exact", "mechanism": {"calibration": "classic"}}
    r = audit(oracle_ctx, epsilon=10.0, **body)
    assert r["calibration_valid"] is False and r["theory_violation"] is True
    assert r["epsilon_exact_at_delta"] == pytest.approx(10.39, abs=0.01)
    assert r["white_box"]["epsilon_empirical"] == pytest.approx(r["epsilon_exact_at_delta"], rel=1e-3)
    assert r["violation"] is True
    ok = audit(oracle_ctx, epsilon=4.0, **body)
    assert ok["calibration_valid"] is True and ok["theory_violation"] is False and not ok["violation"]


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_planted_bug_is_flagged_where_it_breaks_dp(oracle_ctx, bug) -> None:
    setting = BUGS[bug].setting
    results = [
        audit(
            oracle_ctx,
            model="oracle",
            seed=s,
            trials=10_000,
            epsilon=setting["epsilon"],
            mechanism={**setting["mechanism"], "bug": bug},
        )
        for s in range(20)
    ]
    assert sum(r["violation"] for r in results) >= 18
    assert all(r["epsilon_theory"] == setting["epsilon"] for r in results)
    if bug == "sensitivity_one":  # caught by both threat models where it breaks DP
        for tm in ("black_box", "white_box"):
            assert sum(r[tm]["violation"] for r in results) >= 18, tm


def test_bound_stage_reports_progress_and_cancels(oracle_ctx) -> None:
    seen: list[tuple[str, str]] = []

    def progress(stage: str, fraction: float, message: str = "") -> None:
        seen.append((stage, message))
        if message == "white_box lower bound":
            raise AuditCancelled

    oracle_ctx.progress = progress
    with pytest.raises(AuditCancelled):
        audit(oracle_ctx, model="oracle", trials=20_000)
    assert ("bound", "black_box lower bound") in seen and seen[-1] == ("bound", "white_box lower bound")
