"""Generated-text attacks over several canaries (app/audit/attacks/released_text.py): the repeat attack
scored by ROUGE-L, the ContextLeak secret query scored by exact match (app/audit/icl/overlap.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.audit.attacks.canary_prompt import record_secret
from app.audit.icl.overlap import exact, lcs_length, rouge_l
from app.audit.kinds.mia import Request, run
from app.audit.runtime import AuditError, RunContext
from app.audit.standalone import LocalDatasets, LocalEngines, default_data_dir

REPEAT = {"name": "repeat", "score": "rouge_l", "threat_model": "black_box"}
SECRET = {"name": "canary_prompt", "variant": "secret", "score": "exact", "threat_model": "black_box"}


def _ctx() -> RunContext:
    return RunContext(engines=LocalEngines(), datasets=LocalDatasets(default_data_dir()))


def _body(mechanism: dict, attack: dict, **extra) -> dict:
    return {
        "kind": "mia",
        "dataset": "synthetic_records",
        "model": "oracle",
        "estimator": "direct",
        "mechanism": mechanism,
        "attack": attack,
        **extra,
    }


def test_rouge_l_and_exact_match() -> None:
    assert lcs_length(["a", "b", "c", "d"], ["a", "c", "x", "d"]) == 3
    # candidate "a c d" vs reference "a b c d": LCS 3, P = 1, R = 3/4, F1 = 2·¾/(1 + ¾) = 6/7
    assert rouge_l("A, c d!", "a b c d") == pytest.approx(6 / 7)
    assert rouge_l("x y", "a b") == 0.0 and rouge_l("", "a b") == 0.0
    assert exact("3896824-0005", "3896824") == 1.0  # the secret inside a longer answer
    assert exact("389682", "3896824") == 0.0 and exact("3 896824", "3896824") == 0.0
    assert record_secret("Patient A B (MRN-3896824-0005), born 1940") == ("Patient A B (MRN-", "3896824")
    with pytest.raises(AuditError, match="secret"):
        record_secret("no number here 1234")


@pytest.mark.parametrize(
    ("mechanism", "attack", "extra", "field"),
    [
        ({"name": "private_voting"}, REPEAT, {}, "attack.score"),
        ({"name": "none"}, REPEAT | {"threat_model": "both"}, {}, "attack.threat_model"),
        ({"name": "none"}, SECRET, {"estimator": "bootstrap"}, "estimator"),
        ({"name": "none"}, SECRET | {"score": None}, {}, "attack.score"),
        ({"name": "ksa"}, REPEAT | {"score": None}, {}, "attack.score"),
        ({"name": "none"}, REPEAT | {"canary": "my own canary text"}, {}, "attack.canary"),
    ],
)
def test_bad_generated_requests_name_the_field(mechanism, attack, extra, field) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        Request.model_validate(_body(mechanism, attack) | extra)


@pytest.mark.parametrize("attack", [REPEAT, SECRET])
def test_oracle_plain_icl_releases_the_secret_and_the_audit_bounds_it(attack) -> None:
    """The oracle copies the record when it is in the context: 20 records × 10 pairs separate perfectly."""
    body = _body(
        {"name": "none", "shots_per_partition": 2, "temperature": 0},
        attack | {"canaries": 20, "contexts": 10},
    )
    result = run(Request.model_validate(body), _ctx()).stored()
    black = result["black_box"]
    assert black["auc"] == 1.0 and black["tpr_at_fpr"]["0.01"] == 1.0
    assert black["assumption"] == "none" and black["epsilon_lower"] > 3  # 100 held-out trials per side
    assert result["trials"] == 200 and len(result["records"]) == 20
    first = result["generated"]["examples"][0]
    assert first["released_in"] == first["secret"] != first["released_out"]


def test_oracle_ksa_keeps_its_claim_on_the_secret_and_its_noise_hides_it_at_eps_1() -> None:
    """KSA over T = 2 partitions: the secret's keyword count is 1 with the record, 0 without; the
    Gaussian noise (analytic σ) must keep every bound within the claim."""
    results = {}
    for eps in (1.0, 8.0):
        body = _body(
            {"name": "ksa", "partitions": 2, "shots_per_partition": 1, "temperature": 0, "candidates": 1,
             "calibration": "analytic"},
            SECRET | {"threat_model": "both", "canaries": 10, "contexts": 2},
            epsilon=eps,
            llm_calls=200,
        )  # fmt: skip
        results[eps] = run(Request.model_validate(body), _ctx()).stored()
    for eps, result in results.items():
        assert result["trials"] == 4000 and not result["violation"]
        for tm in ("black_box", "white_box"):
            assert result[tm]["assumption"] == "gdp" and result[tm]["epsilon_lower"] <= eps
    # the signal is there (the noisy count of the secret's keyword), weaker at ε = 1
    assert results[8.0]["white_box"]["auc"] > results[1.0]["white_box"]["auc"] > 0.5


def test_smollm2_continues_the_record_from_its_handle_when_it_is_in_the_context(smollm2) -> None:
    """Tiny real run: greedy SmolLM2 copies records' secret numbers out of a 2-exemplar context (on
    100 pairs, docs/results/leakage.md: 89 % of C1 trials, no C0 trial); 4 records, one pair each."""
    body = _body(
        {"name": "none", "shots_per_partition": 2, "temperature": 0, "max_new_tokens": 10},
        SECRET | {"canaries": 4, "contexts": 1},
        model="smollm2-135m-instruct",
    )
    result = run(Request.model_validate(body), _ctx()).stored()
    examples = result["generated"]["examples"]
    assert len(examples) == 4
    assert sum(e["secret"] in e["released_in"] for e in examples) >= 3
    assert not any(e["secret"] in e["released_out"] for e in examples)
    cost = result["generated"]["cost"]
    assert 0 < cost["forward_passes"] <= cost["from_scratch_forward_passes"]
    assert (
        0 < cost["prompt_tokens"] <= cost["from_scratch_tokens"]
    )  # generate() prefills via the prefix KV store


def test_likelihood_of_the_secret_number_is_the_white_box_twin_on_the_oracle() -> None:
    # seed 1: no C0 context holds a namesake of a record (seed 0 does; the oracle then answers the
    # namesake's number, which it cannot score among the labels (secret, "none") and refuses)
    body = _body(
        {"name": "none", "shots_per_partition": 2},
        {"name": "likelihood", "secret": "code", "threat_model": "white_box", "canaries": 5, "contexts": 4},
        seed=1,
    )
    result = run(Request.model_validate(body), _ctx()).stored()
    assert result["white_box"]["auc"] == 1.0  # log p(secret) = 0 with the record, −10⁴ without
    assert len(result["records"]) == 5 and result["likelihood"]["secret"] == "code"
    with pytest.raises(ValidationError, match=r"attack\.secret"):
        Request.model_validate(body | {"mechanism": {"name": "private_voting"}})


SYNTHGEN = {"name": "synthetic_generation", "partitions": 4, "shots_per_partition": 1, "max_new_tokens": 6}


@pytest.mark.parametrize(
    ("mechanism", "attack", "extra", "field"),
    [
        (SYNTHGEN | {"shots_per_partition": 2}, SECRET, {}, "mechanism.shots_per_partition"),
        (SYNTHGEN | {"partitions": 1}, SECRET, {}, "mechanism.partitions"),
        (SYNTHGEN, SECRET | {"threat_model": "both"}, {}, "attack.threat_model"),
        (SYNTHGEN, SECRET, {"estimator": "bootstrap"}, "estimator"),
        (SYNTHGEN, {"name": "likelihood", "secret": "code", "threat_model": "black_box"}, {}, "attack"),
        (SYNTHGEN | {"clip": 0}, SECRET, {}, "mechanism.clip"),
        (SYNTHGEN | {"svt": {"noise": 0}}, SECRET, {}, "mechanism.svt.noise"),
        (SYNTHGEN | {"svt": {"max_private_tokens": 0}}, SECRET, {}, "mechanism.svt.max_private_tokens"),
        (SYNTHGEN | {"svt": {"noise": 0.2}}, SECRET, {"epsilon": 1.0}, "svt.noise"),  # SVT alone costs > 1
        ({"name": "esa", "svt": {}}, REPEAT, {}, "mechanism.svt"),
    ],
)
def test_bad_synthetic_generation_requests_name_the_field(mechanism, attack, extra, field) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        Request.model_validate(_body(mechanism, attack) | extra)


def test_synthetic_generation_claims_remove_one_epsilon_and_refuses_the_oracle() -> None:
    """τ is solved so one text of T private tokens at (c, s) meets the claim (001 Alg. 3 with N_gen = 1);
    the bound is assumption-free (no Gaussian noise model); the oracle has no token distribution."""
    from app.audit.kinds.mia import MechanismSpec
    from app.audit.mechanisms.registry import build_mechanism

    mech = build_mechanism(MechanismSpec.model_validate(SYNTHGEN), epsilon=1.0, delta=1e-5)
    assert mech.theory.epsilon == 1.0 and mech.epsilon_solved <= 1.0 + 1e-9 and not mech.gaussian
    looser = build_mechanism(MechanismSpec.model_validate(SYNTHGEN), epsilon=8.0, delta=1e-5)
    assert looser.temperature < mech.temperature  # a larger ε lets the aggregate speak at a lower τ
    with pytest.raises(AuditError, match="tokenizer"):
        run(Request.model_validate(_body(SYNTHGEN, SECRET | {"canaries": 2, "contexts": 1})), _ctx())


def test_smollm2_synthetic_generation_releases_text_and_keeps_its_claim_at_eps_1(smollm2) -> None:
    """Tiny real run (2 records × 1 pair × 2 calls, s = 4, T = 6): the mechanism wires in, the released texts
    continue the record's prefix, and the assumption-free bound stays within ε = 1."""
    body = _body(
        SYNTHGEN, SECRET | {"canaries": 2, "contexts": 1}, model="smollm2-135m-instruct", llm_calls=2
    )
    result = run(Request.model_validate(body | {"epsilon": 1.0}), _ctx()).stored()
    assert result["trials"] == 4 and result["black_box"]["assumption"] == "none"
    assert not result["violation"] and result["black_box"]["epsilon_lower"] <= 1.0
    extras = result["synthetic_generation"]
    assert extras["batch_size"] == 4 and extras["epsilon_theory_solved"] <= 1.0 + 1e-9
    examples = result["generated"]["examples"]
    assert len(examples) == 2 and all(isinstance(e["released_in"], str) for e in examples)


SVT = {"noise": 8.0, "max_private_tokens": 3}


def test_the_sparse_vector_test_spends_budget_on_r_tokens_only_so_tau_falls() -> None:
    """Amin et al.: only r of the T tokens pay (each with its SVT run), so the claim allows a lower τ than the
    simplified algorithm's T private tokens; the SVT's own cost at small s and noise makes a claim infeasible."""
    from app.audit.kinds.mia import MechanismSpec
    from app.audit.mechanisms.registry import build_mechanism

    spec = SYNTHGEN | {"max_new_tokens": 10}
    simplified = build_mechanism(MechanismSpec.model_validate(spec), epsilon=8.0, delta=1e-5)
    svt = build_mechanism(MechanismSpec.model_validate(spec | {"svt": SVT}), epsilon=8.0, delta=1e-5)
    assert svt.private_tokens == 3 and simplified.private_tokens == 10
    assert svt.temperature < simplified.temperature and svt.epsilon_solved <= 8.0 + 1e-9
    assert svt.result_extras()["synthetic_generation"]["variant"] == "svt"
    with pytest.raises(ValueError, match="not reachable"):
        build_mechanism(MechanismSpec.model_validate(spec | {"svt": {"noise": 0.2}}), epsilon=1.0, delta=1e-5)


def test_smollm2_synthetic_generation_with_the_sparse_vector_test_counts_its_private_tokens(smollm2) -> None:
    """Tiny real run of the full algorithm (2 records × 1 pair × 2 calls): every released text spends at most
    r = 3 private tokens, the result counts them, and the bound stays within ε = 1."""
    mechanism = SYNTHGEN | {"svt": SVT}
    body = _body(
        mechanism, SECRET | {"canaries": 2, "contexts": 1}, model="smollm2-135m-instruct", llm_calls=2
    )
    result = run(Request.model_validate(body | {"epsilon": 1.0}), _ctx()).stored()
    assert not result["violation"] and result["black_box"]["epsilon_lower"] <= 1.0
    extras = result["synthetic_generation"]
    texts = 2 * 2 * 2  # records × calls × (C1, C0)
    assert extras["variant"] == "svt" and extras["private_tokens_claimed"] == 3
    assert 0 < extras["private_steps"] <= 3 * texts and extras["private_steps"] <= extras["steps"]
    assert extras["steps"] <= SYNTHGEN["max_new_tokens"] * texts
