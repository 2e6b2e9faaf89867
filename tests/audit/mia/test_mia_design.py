"""Canary designs (copy, rare token), the published canary effect (`signal`) and `attack: auto` (issue 19)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from app.audit import design
from app.audit.attacks import copy_canary, count_score, inquiry, rare_token
from app.audit.attacks.registry import attack_module
from app.audit.icl.contexts import build_contexts
from app.audit.kinds import mia
from app.audit.seeds import SeedTree

NULL_ENGINE = "simulated:shift=1,alpha=0.1"


def _auto(seed: int, eps: float = 1.0, trials: int = 4000, model: str = NULL_ENGINE) -> dict:
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": model,
        "seed": seed,
        "epsilon": eps,
        "mechanism": {
            "name": "private_voting",
            "partitions": 8,
            "shots_per_partition": 1,
            "calibration": "analytic",
        },
        "attack": {"name": "auto"},
        "llm_calls": 20,
        "trials": trials,
    }


def test_copy_canary_relabels_the_canary_in_c1_only(ag_news) -> None:
    rng = np.random.default_rng(0)
    contexts = build_contexts(ag_news, 8, rng)
    spec = mia.AttackSpec(name="copy")
    planted = copy_canary.plant(contexts, ag_news, spec, rng)
    at = planted.canary_position
    assert planted.without == contexts.without
    assert planted.canary.text == contexts.canary.text and planted.canary.label != contexts.canary.label
    assert planted.with_canary[at] == planted.canary
    assert [
        i for i, (a, b) in enumerate(zip(planted.with_canary, planted.without, strict=True)) if a != b
    ] == [at]
    query = copy_canary.build_query(canary=planted.canary, dataset=ag_news, spec=spec, rng=rng)
    assert (
        query.answers[query.positive] == planted.canary.label
        and query.fields["canary"] == planted.canary.text
    )


def test_rare_token_canary_votes_over_the_labels_and_the_token(ag_news) -> None:
    rng = np.random.default_rng(1)
    spec = mia.AttackSpec(name="rare_token")
    planted = rare_token.plant(build_contexts(ag_news, 4, rng), ag_news, spec, rng)
    query = rare_token.build_query(canary=planted.canary, dataset=ag_news, spec=spec, rng=rng)
    assert planted.canary.label == rare_token.RARE_TOKEN == query.answers[query.positive]
    assert set(query.answers) == {*ag_news.labels, rare_token.RARE_TOKEN}
    own = mia.AttackSpec(name="rare_token", signal_texts=("quokka", "x"))
    assert rare_token.plant(build_contexts(ag_news, 4, rng), ag_news, own, rng).canary.label == "quokka"


def test_signal_is_the_canary_partitions_vote_with_and_without_the_canary(oracle_ctx) -> None:
    body = {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "trials": 2000,
        "epsilon": 4.0,
        "mechanism": {"name": "private_voting"},
    }
    r = mia.run(mia.Request.model_validate(body), oracle_ctx).stored()
    assert r["signal"] == {
        "answer": "Yes",
        "p_with": 1.0,
        "p_without": 0.0,
        "effect": 1.0,
        "valid_with": 1.0,
        "valid_without": 1.0,
        "temperature": 1.0,
    }


def test_pilot_and_measurement_records_are_disjoint(ag_news) -> None:
    pilot, measured = design.pilot_records(ag_news), design.measurement_records(ag_news)
    assert len(pilot.train) + len(measured.train) == len(ag_news.train)
    assert not {id(e) for e in pilot.train} & {id(e) for e in measured.train}


def test_auto_measures_the_chosen_design_as_a_plain_audit_would(oracle_ctx) -> None:
    """The pilot only chooses: the measurement equals the chosen design's own audit on the even records,
    so it reads none of the pilot's records or draws."""
    request = mia.Request.model_validate(_auto(7))
    r = mia.run(request, oracle_ctx).stored()
    chosen = r["design"]
    skipped = {c["attack"] for c in chosen["candidates"] if "skipped" in c}
    assert skipped == {"copy", "rare_token"}  # the simulated engine refuses their query
    assert chosen["attack"] in ("inquiry", "signal_text", "inquiry_count", "signal_text_count")
    assert chosen["partitions"] in (2, 4, 8)
    scored = {(c["attack"], c["partitions"]) for c in chosen["candidates"] if "pilot_mu" in c}
    assert {("inquiry_count", 2), ("signal_text_count", 8)} <= scored  # both scores of every (design, T)
    fixed = request.model_copy(
        update={
            "attack": request.attack.model_copy(update={"name": chosen["attack"]}),
            "mechanism": request.mechanism.model_copy(update={"partitions": chosen["partitions"]}),
        }
    )
    again = mia._run_trials(fixed, oracle_ctx, measured=True)
    for tm in ("black_box", "white_box"):
        assert again[tm]["epsilon_empirical"] == r[tm]["epsilon_empirical"]


def test_auto_refuses_the_exact_estimator() -> None:
    with pytest.raises(ValueError, match="auto selection runs trials"):
        mia.Request.model_validate({**_auto(0), "estimator": "exact"})


def test_design_selection_null_small(oracle_ctx) -> None:
    """A small docs/results/design_null.py: the mechanism exactly at its claim, auto selection, 20 seeded
    audits (seeds 5000…) at ε = 1: no more violations than the 5 % the verdict allows would make likely."""
    flagged = sum(
        mia.run(mia.Request.model_validate(_auto(s)), oracle_ctx).stored()["violation"]
        for s in range(5000, 5020)
    )
    assert flagged <= 2


@pytest.mark.slow
def test_copy_canary_on_smollm2_publishes_its_effect(oracle_ctx, smollm2) -> None:
    oracle_ctx.engines.llms["smollm2"] = smollm2
    body = {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "smollm2",
        "epsilon": 8.0,
        "trials": 20_000,
        "llm_calls": 1,
        "mechanism": {
            "name": "private_voting",
            "partitions": 2,
            "shots_per_partition": 1,
            "calibration": "analytic",
            "temperature": 0.0,
        },
        "attack": {"name": "copy"},
    }
    r = mia.run(mia.Request.model_validate(body), oracle_ctx).stored()
    assert set(r["signal"]) >= {"p_with", "p_without", "effect"} and r["signal"]["temperature"] == 0.0
    assert r["signal"]["p_with"] in (0.0, 1.0)  # greedy votes: a context's effect is 0 or 1
    assert not r["violation"]


def test_the_soundness_section_is_the_design_null_scripts_output() -> None:
    """soundness.md's "Design selection" section is what docs/results/design_null.py --doc writes from the
    committed raw output design-null.md, whose four rows show 200 audits each and no violation above 5 %."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("design_null", root / "docs/results/design_null.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.section() in (root / "docs/results/soundness.md").read_text()
    rows = [r.split("|") for r in module.RAW.read_text().splitlines()[2:]]
    assert [float(r[1]) for r in rows] == list(module.EPSILONS)
    assert all(int(r[2]) == 200 and int(r[3]) <= 10 for r in rows)


def _voting(epsilon: float = 4.0):
    from app.audit.mechanisms.private_voting import PrivateVoting

    spec = mia.MechanismSpec(name="private_voting", partitions=4, calibration="analytic")
    return PrivateVoting.from_spec(spec, epsilon=epsilon, delta=1e-5)


def test_count_score_is_the_noisy_count_of_the_canarys_answer(ag_news) -> None:
    """`inquiry_count` is inquiry's query with other_weight 0: black box unchanged (released label = Yes),
    white box Ṽ_Yes alone; inquiry keeps 003 §3.2's Ṽ_Yes − Ṽ_No."""
    rng = np.random.default_rng(0)
    canary = ag_news.train[0]
    spec = mia.AttackSpec(name="inquiry_count")
    base = inquiry.build_query(canary=canary, dataset=ag_news, spec=spec, rng=rng)
    counted = attack_module("inquiry_count").build_query(canary=canary, dataset=ag_news, spec=spec, rng=rng)
    assert counted.other_weight == 0.0 and base.other_weight == 1.0
    assert counted.template == base.template and counted.answers == base.answers
    assert attack_module("copy_count").plant is copy_canary.plant
    mechanism = _voting()
    clean = np.array([[3.0, 1.0], [0.0, 0.0]])
    release = mechanism.release(clean, np.random.default_rng(1))
    noisy = release.white_box
    decision, score = mechanism.binary_view(release, mechanism.binary_target(counted, None))
    assert np.array_equal(score, noisy[:, 0])
    decision_m, margin = mechanism.binary_view(release, mechanism.binary_target(base, None))
    assert np.array_equal(margin, noisy[:, 0] - noisy[:, 1]) and np.array_equal(decision, decision_m)


@pytest.mark.parametrize("out_votes_other", [False, True])
def test_exact_count_mu_is_the_gaussian_shift_and_matches_a_seeded_simulation(out_votes_other: bool) -> None:
    """One count moves (the partition without the canary casts no vote): Ṽ_y+ reaches μ = 1/σ, Ṽ_y+ − Ṽ_other
    only 1/(√2σ). The canary moves a vote from another label: Ṽ_y+ still 1/σ, the difference √2/σ (the
    Neyman-Pearson score there). exact_count_mu agrees with 400,000 seeded draws of the noise."""
    from scipy import stats

    from app.audit.stats.exact import exact_vote_audit

    sigma = _voting().std
    p_in = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
    p_out = p_in.copy()
    p_out[0] = [0.0, 1.0] if out_votes_other else [0.0, 0.0]
    mu = count_score.exact_count_mu(p_in, p_out, sigma=sigma, target=0)
    assert mu == pytest.approx(1.0 / sigma, rel=1e-6)
    margin = exact_vote_audit(p_in, p_out, sigma=sigma, target=0, other=1, delta=1e-5).mu_white_box
    assert margin == pytest.approx((np.sqrt(2.0) if out_votes_other else 1 / np.sqrt(2.0)) / sigma, rel=1e-3)
    rng = np.random.default_rng(19)
    n, tau = 400_000, 1.5  # V_in,y+ = 2, V_out,y+ = 1: the midpoint
    tpr = np.mean(2.0 + sigma * rng.standard_normal(n) > tau)
    fpr = np.mean(1.0 + sigma * rng.standard_normal(n) > tau)
    assert stats.norm.ppf(tpr) - stats.norm.ppf(fpr) == pytest.approx(mu, abs=0.01)


def test_count_score_variants_refuse_the_exact_estimator() -> None:
    body = {**_auto(0), "attack": {"name": "inquiry_count"}, "estimator": "exact"}
    with pytest.raises(ValueError, match="exact estimator computes"):
        mia.Request.model_validate(body)


def test_count_score_null_small(oracle_ctx) -> None:
    """A small `docs/results/design_null.py --count`: the Ṽ_y+ score exactly at its claim (σ for Δ₂ = 1, the
    canary moves one count of y+), 20 seeded audits at ε = 4: no more violations than 5 % makes likely,
    and the score has power (the mean ε_lower is a good share of the claim)."""
    import importlib.util
    from pathlib import Path

    root = Path(__file__).resolve().parents[3]
    spec = importlib.util.spec_from_file_location("design_null", root / "docs/results/design_null.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    runs = [
        mia.run(mia.Request.model_validate(module.count_body(s, 4.0, trials=4000)), oracle_ctx).stored()
        for s in range(5000, 5020)
    ]
    assert sum(r["violation"] for r in runs) <= 2
    assert np.mean([r["white_box"]["epsilon_lower"] or 0.0 for r in runs]) > 1.0


@pytest.mark.parametrize("raw", ["design-null.md", "design-null-count.md", "design-null-abstain.md"])
def test_the_reruns_of_the_null_are_committed(raw: str) -> None:
    """docs/results/design-null.md (`auto`, both white-box scores among its candidates), design-null-count.md
    (`design_null.py --count`, the Ṽ_y+ score at its claim) and design-null-abstain.md (`auto` where it
    prefers Ṽ_y+): every ε, 200 audits each, violations within what a 5 % rate makes likely."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[3] / "docs/results" / raw).read_text()
    rows = [r.split("|") for r in text.splitlines()[2:] if r.startswith("|")]
    assert [float(r[1]) for r in rows] == [1.0, 2.0, 4.0, 8.0]
    assert all(int(r[2]) >= 200 and int(r[3]) <= 0.1 * int(r[2]) for r in rows)


def _teacher_body(teacher_output: str | None, **over) -> dict:
    """Inquiry against private voting on a simulated model whose free decoding mostly leaves the label set
    (valid = 0.2): the canary's partition votes Yes with the canary, mostly nothing without it."""
    mechanism = {
        "name": "private_voting",
        "partitions": 4,
        "shots_per_partition": 1,
        "calibration": "analytic",
    }
    if teacher_output is not None:
        mechanism["teacher_output"] = teacher_output
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "simulated:shift=1,alpha=0.5,valid=0.2",
        "seed": 3,
        "epsilon": 4.0,
        "trials": 4000,
        "llm_calls": 20,
        "mechanism": mechanism,
        "attack": {"name": "inquiry"},
    } | over


def test_label_logprobs_teachers_always_cast_a_valid_vote(oracle_ctx) -> None:
    """`mechanism.teacher_output: label_logprobs`: each partition votes argmax_k log P(t_k | prompt) at τ = 0
    and a softmax draw over the labels at τ > 0, so a partition whose free decoding leaves the label set
    still votes; free-text teachers keep decoding.py's rule (an invalid vote casts none)."""
    from app.audit.mechanisms.base import CleanSource
    from app.audit.mechanisms.private_voting import PrivateVoting

    source = CleanSource(oracle_ctx.engines.llm("simulated:shift=1,alpha=0.5,valid=0.2"))
    query = inquiry.build_query(canary=mia_example(), dataset=None, spec=mia.AttackSpec(), rng=None)
    for temperature in (0.0, 1.0):
        spec = mia.MechanismSpec(
            name="private_voting",
            partitions=2,
            calibration="analytic",
            temperature=temperature,
            teacher_output="label_logprobs",
        )
        mechanism = PrivateVoting.from_spec(spec, epsilon=4.0, delta=1e-5)
        prompts = mechanism.audit_inputs(query, [(mia_example(),), ()])
        scores = source.label_logprobs(prompts, query.answers)
        probs = mechanism.label_probs(prompts, query.answers, source)
        assert np.allclose(probs.sum(axis=1), 1.0)
        if temperature == 0.0:
            assert set(probs.ravel()) <= {0.0, 1.0}
            assert np.array_equal(probs.argmax(axis=1), scores.argmax(axis=1))
        else:
            soft = np.exp(scores - scores.max(axis=1, keepdims=True))
            assert np.allclose(probs, soft / soft.sum(axis=1, keepdims=True))
        free = PrivateVoting.from_spec(
            spec.model_copy(update={"teacher_output": "free_text"}), epsilon=4.0, delta=1e-5
        )
        free_probs = free.label_probs(prompts, query.answers, source)
        assert np.array_equal(free_probs, source.vote_probs(prompts, query.answers, temperature))
        assert free_probs[1].sum() < 1.0  # without the canary most of its mass falls outside the labels


def test_label_scores_become_votes_as_the_teachers_give_them() -> None:
    """`votes_from_scores` (the likelihood attack's votes under private voting): free-text teachers keep the
    mass outside the labels as an invalid vote (decoding.label_distribution), label_logprobs teachers vote the
    labels' argmax at τ = 0."""
    from app.audit.mechanisms.base import label_distribution
    from app.audit.mechanisms.private_voting import PrivateVoting

    scores = np.log([[0.2, 0.1], [0.05, 0.3]])  # most of each partition's mass is outside the labels
    spec = mia.MechanismSpec(name="private_voting", partitions=2, calibration="analytic", temperature=0.0)
    free = PrivateVoting.from_spec(spec, epsilon=4.0, delta=1e-5)
    assert np.array_equal(free.votes_from_scores(scores), label_distribution(scores, 0.0))
    assert not free.votes_from_scores(scores).any()  # greedy free text answers outside the labels
    labels = PrivateVoting.from_spec(
        spec.model_copy(update={"teacher_output": "label_logprobs"}), epsilon=4.0, delta=1e-5
    )
    assert np.array_equal(labels.votes_from_scores(scores), [[1.0, 0.0], [0.0, 1.0]])


def test_teacher_output_is_the_mechanisms_and_free_text_by_default(oracle_ctx) -> None:
    """The default is free text, the same audit as saying so; label_logprobs changes what the teachers do:
    the canary's partition without the canary now votes (valid_without 1), so two counts move, and the
    audit sees more (white box)."""
    default = mia.Request.model_validate(_teacher_body(None))
    assert default.mechanism.teacher_output == "free_text"
    free = mia.run(default, oracle_ctx).stored()
    assert free == mia.run(mia.Request.model_validate(_teacher_body("free_text")), oracle_ctx).stored()
    labels = mia.run(mia.Request.model_validate(_teacher_body("label_logprobs")), oracle_ctx).stored()
    assert free["signal"]["valid_without"] == pytest.approx(0.2)
    assert labels["signal"]["valid_without"] == 1.0 and labels["signal"]["valid_with"] == 1.0
    assert labels["signal"] != free["signal"]


@pytest.mark.parametrize("old", ["copy_constrained", "inquiry_constrained_count", "signal_text_constrained"])
def test_the_retired_constrained_names_are_refused_naming_the_field(old: str) -> None:
    """The teachers' output is the mechanism's: an old `*_constrained[_count]` name is a 422 at attack.name
    that says what to send instead; the `*_count` names stay."""
    from pydantic import ValidationError

    with pytest.raises(ValidationError) as caught:
        mia.Request.model_validate(_teacher_body(None, attack={"name": old}))
    (error,) = caught.value.errors()
    assert error["loc"] == ("attack", "name")
    new = old.replace("_constrained", "")
    assert (
        f'attack.name "{new}"' in error["msg"] and 'mechanism.teacher_output "label_logprobs"' in error["msg"]
    )
    assert mia.Request.model_validate(_teacher_body("label_logprobs", attack={"name": new}))
    assert not any(name.endswith(("_constrained", "_constrained_count")) for name in count_score.NAMES)


def test_teacher_output_applies_to_private_voting_only() -> None:
    body = {
        "kind": "mia",
        "dataset": "synthetic_records",
        "mechanism": {"name": "none", "teacher_output": "label_logprobs"},
        "attack": {"name": "inquiry"},
    }
    with pytest.raises(ValueError, match=r"mechanism\.teacher_output: none has no teachers"):
        mia.Request.model_validate(body)
    assert mia.Request.model_validate(body | {"mechanism": {"name": "none", "teacher_output": "free_text"}})


def mia_example():
    from app.datasets.types import Example

    return Example(text="The sun rises in the west.", label="World")


def test_the_count_variants_read_what_their_design_reads() -> None:
    """An unlabelled dataset serves inquiry's and signal_text's variants (they read text only); the copy
    and rare-token designs write a label into their canary exemplar, so their variants are refused there."""
    from app.audit.kinds.mia import Request, label_field

    def body(attack: str) -> dict:
        return {
            "kind": "mia",
            "dataset": "synthetic_records",
            "mechanism": {"name": "private_voting"},
            "attack": {"name": attack},
            "estimator": "bootstrap",
        }

    for base in ("inquiry", "signal_text"):
        assert label_field(Request.model_validate(body(base + "_count"))) is None, base
    assert label_field(Request.model_validate(body("copy_count"))) == "$.attack.name"


def _copy_request(attack: str, mechanism: str = "private_voting", **extra) -> mia.Request:
    body = {**_auto(0), "attack": {"name": attack}, **extra}
    body["mechanism"] = {**body["mechanism"], "name": mechanism}
    if mechanism != "private_voting":
        body["mechanism"] = {"name": mechanism, "partitions": 2, "shots_per_partition": 1}
    return mia.Request.model_validate(body)


def test_the_canary_search_runs_for_copy_canaries_of_private_voting_only() -> None:
    """Both white-box scores of the copy canary search under private voting; other designs keep their
    own canary, and a mechanism without exact label distributions is not searched."""
    assert design.searches(_copy_request("copy")) and design.searches(_copy_request("copy_count"))
    for attack in ("inquiry", "rare_token", "signal_text_count"):
        assert not design.searches(_copy_request(attack))
    assert not design.searches(_copy_request("copy", mechanism="none"))


@pytest.mark.slow
def test_the_canary_search_picks_a_neighbouring_pair_whose_vote_flips_on_smollm2(oracle_ctx, smollm2) -> None:
    """On the packaged model with label_logprobs teachers (trec, seed 1, T = 2, the measurement's records) the
    search returns a pair that is still neighbouring (C0 untouched, C1 differs at the canary's position
    only), whose canary's partition votes y* with the canary and another label w without it, with the
    white box scored against w; no label of the chosen record gives a larger μ."""
    oracle_ctx.engines.llms["smollm2"] = smollm2
    body = {
        "kind": "mia",
        "dataset": "trec",
        "model": "smollm2",
        "seed": 1,
        "epsilon": 4.0,
        "trials": 1000,
        "llm_calls": 1,
        "mechanism": {
            "name": "private_voting",
            "partitions": 2,
            "shots_per_partition": 1,
            "calibration": "analytic",
            "temperature": 0.0,
            "teacher_output": "label_logprobs",
        },
        "attack": {"name": "copy"},
    }
    request = mia.Request.model_validate(body)
    setup = mia._setup(request, oracle_ctx, measured=True)
    search = setup.search
    assert search is not None and search["pairs_tried"] == search["records_tried"] * len(setup.dataset.labels)
    assert "canary" not in search  # the record's text only in the result's `canary`, which redaction masks
    c = setup.contexts
    drawn = build_contexts(setup.dataset, 2, SeedTree.from_seed(1).rng("contexts"), None)
    assert c.without == drawn.without and c.canary_position == drawn.canary_position
    assert [i for i, (a, b) in enumerate(zip(c.with_canary, c.without, strict=True)) if a != b] == [
        c.canary_position
    ]
    assert c.with_canary[c.canary_position] == c.canary and c.canary.label == search["label"]
    assert setup.query.answers[setup.query.positive] == search["label"]
    signal = design.canary_signal(
        setup.mechanism, setup.query, setup.prompts_in, setup.prompts_out, setup.source
    )
    assert design.flips(signal) and signal["effect"] == search["effect"]
    k = next(i for i, (a, b) in enumerate(zip(setup.prompts_in, setup.prompts_out, strict=True)) if a != b)
    vote_out = setup.mechanism.label_probs([setup.prompts_out[k]], setup.query.answers, setup.source)[0]
    assert setup.query.negative == int(np.argmax(vote_out)) != setup.query.positive
    for label in setup.dataset.labels:  # the largest μ of the chosen record
        pair = design.planted(c, replace(c.canary, label=label))
        parts = design._swap(setup.parts_in, c.canary, pair.canary)
        query = copy_canary.build_query(
            canary=pair.canary, dataset=setup.dataset, spec=request.attack, rng=None
        )
        scores_out = vote_out.copy()
        scores_out[query.positive] = -1.0  # w: the label it votes without the canary, other than y*
        query = replace(query, negative=int(np.argmax(scores_out)))
        prompts_out = setup.mechanism.audit_inputs(query, setup.parts_out)
        mu = design.pair_mus(
            setup.mechanism,
            query,
            setup.mechanism.audit_inputs(query, parts),
            prompts_out,
            setup.source,
            request,
        )[0]
        assert mu <= search["mu"] + 1e-12


def test_the_search_records_grow_with_fewer_labels_and_keep_their_first_draws(ag_news) -> None:
    """`search_records`: the drawn canary first, no record of C0 and none twice; up to SEARCH_PAIRS
    (record, label) pairs in all (at least SEARCH_RECORDS records); its first SEARCH_RECORDS are the draws
    of a search with SEARCH_RECORDS records only, so a search that flips among them is unchanged."""
    contexts = build_contexts(ag_news, 4, np.random.default_rng(5))
    records = design.search_records(ag_news, contexts, np.random.default_rng(6))
    assert records[0] is contexts.canary
    assert len(records) == design.SEARCH_PAIRS // len(ag_news.labels) > design.SEARCH_RECORDS
    texts = [r.text for r in records]
    assert len(set(texts)) == len(texts) and not set(texts) & {e.text for e in contexts.without}
    others = [e for e in ag_news.train if e.text not in {*(e.text for e in contexts.without), texts[0]}]
    first = np.random.default_rng(6).choice(len(others), size=design.SEARCH_RECORDS - 1, replace=False)
    assert texts[1 : design.SEARCH_RECORDS] == [others[int(i)].text for i in first]
    many = replace(ag_news, labels=tuple(f"label{k}" for k in range(64)))
    assert len(design.search_records(many, contexts, np.random.default_rng(6))) == design.SEARCH_RECORDS


def _signal(p_with: float, p_without: float) -> dict:
    return {
        "p_with": p_with,
        "p_without": p_without,
        "effect": p_with - p_without,
        "valid_with": 1.0,
        "valid_without": 1.0,
    }


def _table_search(table: dict, records: int, positions: list[int]) -> tuple[design.Search, list]:
    """`design.Search` over records r0, r1, … and labels a, b at drawn position 0, scoring each triple by
    `table` (its signal; μ = 2 for a flip, 0.5 × p_with otherwise; None: no partition holds the position)."""
    calls: list[tuple[str, str, int]] = []

    def evaluate(record: str, label: str, position: int):
        calls.append((record, label, position))
        signal = table.get((record, label, position), _signal(0.0, 0.0))
        if signal is None:
            return None
        mu = 2.0 if design.flips(signal) else 0.5 * signal["p_with"]
        return mu, (record, label, position), signal

    search = design.Search([f"r{i}" for i in range(records)], ("a", "b"), 0, positions)
    search.run(evaluate)
    return search, calls


def test_the_canary_search_tries_every_record_at_the_drawn_position_first() -> None:
    """Records are tried in order at the drawn position until a pair flips its partition's vote, beyond the
    first SEARCH_RECORDS when more are given, before any other position; the flip is chosen."""
    late = design.SEARCH_RECORDS + 3
    table = {(f"r{late}", "b", 0): _signal(1.0, 0.0), ("r1", "a", 0): _signal(1.0, 1.0)}
    search, calls = _table_search(table, records=2 * design.SEARCH_RECORDS, positions=[1])
    assert search.best is not None and search.best[1] == (f"r{late}", "b", 0)
    assert {p for _, _, p in calls} == {0} and calls[-1] == (f"r{late}", "b", 0)
    assert search.groups == late + 1 and search.pairs == 2 * (late + 1)


def test_the_position_step_moves_only_the_pairs_that_take_their_label() -> None:
    """No record flips at the drawn position: the position step tries, at each other position in order,
    only the pairs whose partition votes y* with the canary there (r1 with a: it votes a without the
    canary too); a position no partition holds is skipped; the first flip ends the search. r2 with b would
    flip at position 2 as well, but its partition does not take b at the drawn position, so it is not
    tried."""
    table = {
        ("r1", "a", 0): _signal(1.0, 1.0),
        ("r1", "a", 1): None,
        ("r1", "a", 2): _signal(1.0, 0.0),
        ("r2", "b", 2): _signal(1.0, 0.0),
        ("r3", "a", 0): _signal(0.4, 0.0),
    }
    search, calls = _table_search(table, records=4, positions=[1, 2, 3])
    assert calls[:8] == [(f"r{i}", label, 0) for i in range(4) for label in ("a", "b")]
    assert calls[8:] == [("r1", "a", 1), ("r1", "a", 2)]
    assert search.best is not None and search.best[1] == ("r1", "a", 2) and design.flips(search.best[2])
    assert search.groups == 5 and search.pairs == 9


def test_without_a_flip_the_search_keeps_the_largest_mu_first_on_ties() -> None:
    table = {("r0", "b", 0): _signal(0.6, 0.0), ("r2", "a", 0): _signal(0.6, 0.0)}
    search, calls = _table_search(table, records=3, positions=[1])
    assert search.best is not None and search.best[1] == ("r0", "b", 0)
    assert all(p == 0 for _, _, p in calls)  # nothing takes its label: no position step


@pytest.mark.slow
def test_the_canary_search_reaches_past_sst2s_label_prior_on_smollm2(oracle_ctx, smollm2) -> None:
    """sst2 seed 2, T = 2, label_logprobs teachers (the measurement's records): SmolLM2's "positive" prior
    beats a copied "negative" on the first SEARCH_RECORDS records, so the search reads more records, and
    one flips its partition's vote at the drawn position. The dataset is read as the service reads it
    (`LocalDatasets`: its label order is the prompt's)."""
    import dataclasses
    from pathlib import Path

    from app.audit.standalone import LocalDatasets

    oracle_ctx.engines.llms["smollm2"] = smollm2
    shared = Path(__file__).resolve().parents[3].parent / "shared" / "datasets"
    ctx = dataclasses.replace(oracle_ctx, datasets=LocalDatasets(shared))
    body = {
        "kind": "mia",
        "dataset": "sst2",
        "model": "smollm2",
        "seed": 2,
        "epsilon": 4.0,
        "trials": 1000,
        "llm_calls": 1,
        "mechanism": {
            "name": "private_voting",
            "partitions": 2,
            "shots_per_partition": 1,
            "calibration": "analytic",
            "temperature": 0.0,
            "teacher_output": "label_logprobs",
        },
        "attack": {"name": "copy"},
    }
    setup = mia._setup(mia.Request.model_validate(body), ctx, measured=True)
    search = setup.search
    assert search is not None and search["records_tried"] > design.SEARCH_RECORDS
    assert search["effect"] == 1.0 and not search["position_moved"]
    signal = design.canary_signal(
        setup.mechanism, setup.query, setup.prompts_in, setup.prompts_out, setup.source
    )
    assert design.flips(signal)
