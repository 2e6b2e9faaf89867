"""The likelihood family (app/audit/attacks/token_likelihood.py and its attack modules): the scores'
formulas, the request rules, and each member on SmolLM2 over one shared collection."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
from pydantic import ValidationError

from app.audit.attacks import token_likelihood as fam
from app.audit.kinds.mia import Request, judged
from app.audit.mechanisms.registry import build_mechanism
from app.audit.runtime import RunContext
from app.audit.seeds import SeedTree
from app.audit.standalone import LocalDatasets, LocalEngines, default_data_dir
from testkit.client import white_box_request

MEMBERS = ("min_k", "min_k_pp", "zlib_ratio", "lira_offline", "recall", "blind")


def _body(name: str, **attack) -> dict:
    sizes = {"canaries": 3, "contexts": 2} | attack
    return white_box_request("synthetic_records", model="smollm2-135m-instruct", seed=3, attack=name, **sizes)


def test_scores_follow_their_formulas() -> None:
    logp = np.array([-0.1, -5.0, -0.2, -3.0, -0.3])
    assert fam.min_k(logp) == -5.0  # ⌈0.2·5⌉ = 1 lowest
    assert fam.min_k(logp, 0.4) == pytest.approx(-4.0)
    mean, std = np.full(5, -1.0), np.full(5, 2.0)
    assert fam.min_k_pp(logp, mean, std) == pytest.approx(-2.0)  # (−5 + 1)/2
    text = "Patient Ada reports a cough."
    assert fam.zlib_ratio(-10.0, text) == -10.0 / len(zlib.compress(text.encode()))
    assert fam.recall(-20.0, -10.0) == 2.0
    assert fam.blind(text) == -len(zlib.compress(text.encode())) / len(text)
    # LiRA offline: per-record centring, pooled within-record σ
    ref = np.array([1.0, 3.0, 10.0, 12.0])
    z = fam.lira_offline(np.array([4.0, 11.0]), np.array([0, 1]), ref, np.array([0, 0, 1, 1]))
    assert z == pytest.approx([2.0, 0.0])


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"threat_model": "both"}, "attack.threat_model"),
        ({"secret": "label"}, "attack.secret"),
        ({"reference": True}, "attack.reference"),
    ],
)
def test_bad_family_requests_name_the_field(change, field) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        Request.model_validate(_body("min_k", **change))
    with pytest.raises(ValidationError, match=r"attack\.contexts"):
        Request.model_validate(_body("lira_offline", contexts=1))


@pytest.fixture(scope="module")
def family(smollm2):
    ctx = RunContext(engines=LocalEngines(), datasets=LocalDatasets(default_data_dir()))
    request = Request.model_validate(_body("recall"))
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    trials = fam.collect_family(request, ctx, mechanism, SeedTree.from_seed(request.seed), with_recall=True)
    return ctx, trials


def test_token_losses_equal_the_likelihood_attacks_scores_on_smollm2(family) -> None:
    """Σ_t log p_t from the per-token distributions is the `likelihood` attack's log p(secret | prompt)."""
    from app.audit.attacks.likelihood import collect

    ctx, trials = family
    request = Request.model_validate(_body("likelihood"))
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    plain = collect(request, ctx, mechanism, SeedTree.from_seed(request.seed))
    losses = np.array([s.loss for s in trials.stats_in])
    assert losses == pytest.approx(plain.scores_in, abs=1e-3)
    assert [r["record_id"] for r in trials.records] == [r["record_id"] for r in plain.records]
    for s in trials.stats_in:
        assert np.all(s.std >= 0) and np.all(s.logp <= 0) and np.all(np.isfinite(s.mean))


@pytest.mark.parametrize("name", MEMBERS)
def test_each_member_audits_smollm2(family, name) -> None:
    ctx, trials = family
    request = Request.model_validate(_body(name, **({"contexts": 2} if name == "lira_offline" else {})))
    scored = fam.scored(trials, name, request.attack.contexts)
    result = judged(request, fam.run_scored(request, ctx, name, scored))
    white = result["white_box"]
    expected = 3 if name == "lira_offline" else 6  # lira: the first pair of each record is its reference
    assert result["trials"] == expected and result["likelihood"]["score"] == name
    assert 0 <= white["auc"] <= 1 and white["epsilon_lower"] >= 0
    if name == "blind":
        assert white["auc"] == 0.5 and white["epsilon_lower"] == 0  # the same score on both sides
    elif name != "recall":
        assert white["auc"] > 0.5  # SmolLM2 copies the record from its context
    assert math.isfinite(white["auc"])


def test_blind_runs_without_the_model_on_the_same_records(family) -> None:
    ctx, trials = family
    request = Request.model_validate(_body("blind") | {"model": "oracle"})
    result = fam.run_scored(request, ctx, "blind")
    assert [r["record_id"] for r in result["records"]] != []
    assert sorted(r["record_id"] for r in result["records"]) == sorted(r["record_id"] for r in trials.records)
    assert result["llm_forward_passes"] == 0
