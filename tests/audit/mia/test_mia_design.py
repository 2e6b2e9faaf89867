"""Canary designs (copy, rare token), the published canary effect (`signal`) and `attack: auto` (issue 19)."""

from __future__ import annotations

import numpy as np
import pytest

from app.audit import design
from app.audit.attacks import copy_canary, rare_token
from app.audit.icl.contexts import build_contexts
from app.audit.kinds import mia

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
    r = mia.run(mia.Request.model_validate(body), oracle_ctx)
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
    r = mia.run(request, oracle_ctx)
    chosen = r["design"]
    skipped = {c["attack"] for c in chosen["candidates"] if "skipped" in c}
    assert skipped == {"copy", "rare_token"}  # the simulated engine refuses their query
    assert chosen["attack"] in ("inquiry", "signal_text") and chosen["partitions"] in (2, 4, 8)
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
        mia.run(mia.Request.model_validate(_auto(s)), oracle_ctx)["violation"] for s in range(5000, 5020)
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
    r = mia.run(mia.Request.model_validate(body), oracle_ctx)
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
