"""The `bound` audit kind, the science CLI, and the /v1/accounting router (mounted on a bare app)."""

from __future__ import annotations

import json

import numpy as np
import pydantic
import pytest
import typer
from fastapi import FastAPI
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from app.api.routes.accounting import router
from app.audit.accounting.rdp import synthetic_generation_epsilon
from app.audit.kinds import bound
from app.audit.runtime import RunContext
from app.cli.science import register


def test_kind_with_counts_and_the_example() -> None:
    seen: list[tuple[str, float]] = []
    ctx = RunContext(progress=lambda stage, fraction, message="": seen.append((stage, fraction)))
    result = bound.run(bound.Request.model_validate(bound.EXAMPLE), ctx).stored()
    for key in ("tpr", "fpr", "mu_lower", "epsilon_empirical", "epsilon_point", "threshold", "auc"):
        assert key in result
    assert result["tpr"] == 0.6 and result["mu_lower"] > 0 and result["biased"] is False
    assert seen[0] == ("bound", 0.0) and seen[-1] == ("bound", 1.0)
    json.dumps(result)


def test_kind_with_scores_labels_in_sample_as_biased() -> None:
    rng = np.random.default_rng(0)
    body = {
        "kind": "bound",
        "scores_in": rng.normal(1, 1, 400).tolist(),
        "scores_out": rng.normal(0, 1, 400).tolist(),
    }
    split = bound.run(bound.Request.model_validate(body), RunContext()).stored()
    assert split["threshold_strategy"] == "split" and split["auc"] > 0.7 and "note" not in split
    biased = bound.run(
        bound.Request.model_validate(body | {"threshold_strategy": "in_sample"}), RunContext()
    ).stored()
    assert biased["biased"] is True and "optimistic" in biased["note"]


@pytest.mark.parametrize(
    ("body", "field", "text"),
    [
        ({"kind": "bound"}, None, "give either counts or scores_in and scores_out"),
        (
            {"kind": "bound", "counts": {"tp": 1, "fn": 1, "fp": 1, "tn": 1}, "scores_in": [1.0]},
            None,
            "either",
        ),
        ({"kind": "bound", "counts": {"tp": 0, "fn": 0, "fp": 1, "tn": 1}}, "counts", "C1"),
        ({"kind": "bound", "counts": {"tp": -1, "fn": 0, "fp": 1, "tn": 1}}, "tp", "greater than or equal"),
        (
            {"kind": "bound", "counts": {"tp": 1, "fn": 1, "fp": 1, "tn": 1}, "confidence": 1.0},
            "confidence",
            "less",
        ),
        (
            {"kind": "bound", "scores_in": [1.0], "scores_out": []},
            None,
            "scores_out must be a non-empty list",
        ),
    ],
)
def test_kind_validation_names_the_field(body: dict, field: str | None, text: str) -> None:
    with pytest.raises(pydantic.ValidationError) as info:
        bound.Request.model_validate(body)
    message = str(info.value)
    assert text in message
    if field:
        assert field in message


def _cli() -> typer.Typer:
    app = typer.Typer()
    register(app)
    return app


def test_cli_bound_json_and_bad_values() -> None:
    runner = CliRunner()
    ok = runner.invoke(
        _cli(), ["bound", "--tp", "900", "--fn", "100", "--fp", "100", "--tn", "900", "--json"]
    )
    assert ok.exit_code == 0
    assert json.loads(ok.stdout)["mu_lower"] == pytest.approx(2.3471, abs=1e-4)
    table = runner.invoke(_cli(), ["bound", "--tp", "9", "--fn", "1", "--fp", "1", "--tn", "9"])
    assert table.exit_code == 0 and "mu_lower" in table.stdout
    bad = runner.invoke(_cli(), ["bound", "--tp", "9", "--fn", "1", "--fp", "1", "--tn", "9", "--delta", "2"])
    assert bad.exit_code == 2 and "--delta" in bad.output
    empty = runner.invoke(_cli(), ["bound", "--tp", "0", "--fn", "0", "--fp", "1", "--tn", "9"])
    assert empty.exit_code == 2 and "--tp" in empty.output


def test_cli_accounting() -> None:
    runner = CliRunner()
    args = ["accounting", "synthetic-generation", "--target-epsilon", "1", "--delta", "1e-5", "--clip", "10",
            "--batch-size", "50", "--sequences", "50", "--max-new-tokens", "40", "--solve-for", "temperature", "--json"]  # fmt: skip
    solved = json.loads(runner.invoke(_cli(), args).stdout)
    assert round(solved["temperature"], 2) == 36.18 and solved["alpha"] == 18
    size = runner.invoke(
        _cli(), ["accounting", "synthetic-generation", "--target-epsilon", "5", "--clip", "10", "--temperature", "2",
                 "--solve-for", "batch-size", "--json"],
    )  # fmt: skip
    assert json.loads(size.stdout)["batch_size"] == 214
    clash = runner.invoke(_cli(), [*args[:-3], "--temperature", "3", "--solve-for", "temperature"])
    assert clash.exit_code == 2 and "--temperature" in clash.output
    gaussian = runner.invoke(
        _cli(), ["accounting", "gaussian", "--epsilon", "1", "--delta", "1e-5", "--json"]
    )
    assert json.loads(gaussian.stdout)["sigma"] == pytest.approx(4.844805, rel=1e-6)
    svt = runner.invoke(
        _cli(), ["accounting", "synthetic-generation", "--clip", "10", "--batch-size", "10", "--temperature", "3",
                 "--sequences", "2", "--max-new-tokens", "6", "--svt-noise", "1", "--private-tokens", "8", "--json"],
    )  # fmt: skip
    assert json.loads(svt.stdout)["epsilon"] == pytest.approx(
        synthetic_generation_epsilon(
            clip=10, batch_size=10, temperature=3, sequences=2, max_new_tokens=6, delta=1e-5, svt_noise=1.0,
            private_tokens=8,
        )[0]
    )  # fmt: skip
    bad = runner.invoke(_cli(), ["accounting", "gaussian", "--epsilon", "0"])
    assert bad.exit_code == 2 and "--epsilon" in bad.output


def test_api_accounting_router() -> None:
    app = FastAPI()
    app.include_router(router)
    client = TestClient(app)
    body = {"target_epsilon": 10, "delta": 1e-5, "temperature": 2, "batch_size": 50, "solve_for": "clip"}
    response = client.post("/v1/accounting/synthetic-generation", json=body)
    assert response.status_code == 200
    assert round(response.json()["clip"], 2) == 4.16 and response.json()["alpha"] == 3
    plain = client.post(
        "/v1/accounting/synthetic-generation", json={"clip": 10, "batch_size": 50, "temperature": 36.18}
    )
    assert plain.json()["epsilon"] == pytest.approx(1.0, abs=1e-3)
    missing = client.post("/v1/accounting/synthetic-generation", json={"clip": 10, "batch_size": 50})
    assert missing.status_code == 422 and "temperature" in missing.text
    clash = client.post("/v1/accounting/synthetic-generation", json=body | {"clip": 3})
    assert clash.status_code == 422 and "clip" in clash.text
    # Amin et al.'s sparse-vector variant: r private tokens with their SVT runs (Thm 1), same as the library
    svt = {"clip": 10, "batch_size": 10, "temperature": 3, "sequences": 2, "max_new_tokens": 6}
    answer = client.post(
        "/v1/accounting/synthetic-generation", json=svt | {"svt_noise": 1, "private_tokens": 8}
    )
    expected = synthetic_generation_epsilon(**svt, delta=1e-5, svt_noise=1.0, private_tokens=8)
    assert answer.status_code == 200 and (answer.json()["epsilon"], answer.json()["alpha"]) == expected
    lone = client.post("/v1/accounting/synthetic-generation", json=svt | {"private_tokens": 8})
    assert lone.status_code == 422 and "svt_noise" in lone.text
    g = client.post("/v1/accounting/gaussian", json={"epsilon": 1, "delta": 1e-5, "sensitivity": 2**0.5})
    assert g.status_code == 200 and g.json()["mu"] == pytest.approx(2**0.5 / g.json()["sigma"])
    assert client.post("/v1/accounting/gaussian", json={"epsilon": -1}).status_code == 422


def test_kind_reports_both_bounds_and_the_verdict_of_its_assumption() -> None:
    # Randomized response at exactly (1, 0)-DP, 5000 trials per side: rates 0.731 / 0.269.
    counts = {"tp": 3655, "fn": 1345, "fp": 1345, "tn": 3655}
    body = {"kind": "bound", "counts": counts, "epsilon": 1.0}
    safe = bound.run(bound.Request.model_validate(body), RunContext()).stored()
    assert safe["assumption"] == "none" and safe["epsilon_lower"] == safe["epsilon_empirical_assumption_free"]
    assert safe["epsilon_lower"] <= 1.0 and safe["violation"] is False
    assert safe["epsilon_empirical"] > 4  # the GDP route overstates ε for this non-Gaussian mechanism
    gdp = bound.run(bound.Request.model_validate(body | {"assumption": "gdp"}), RunContext()).stored()
    assert gdp["epsilon_lower"] == gdp["epsilon_empirical"] and gdp["violation"] is True
    no_claim = bound.run(
        bound.Request.model_validate({"kind": "bound", "counts": counts}), RunContext()
    ).stored()
    assert no_claim["violation"] is None and no_claim["epsilon_claimed"] is None
    with pytest.raises(pydantic.ValidationError, match="assumption"):
        bound.Request.model_validate(body | {"assumption": "gaussian"})
    rng = np.random.default_rng(1)
    scores = {"scores_in": (1 + rng.laplace(size=500)).tolist(), "scores_out": rng.laplace(size=500).tolist()}
    for strategy in ("split", "bonferroni", "in_sample"):
        r = bound.run(
            bound.Request.model_validate({"kind": "bound", **scores, "threshold_strategy": strategy}),
            RunContext(),
        ).stored()
        assert r["assumption"] == "none" and 0 <= r["epsilon_empirical_assumption_free"] == r["epsilon_lower"]
        json.dumps(r)
    claimed = {"kind": "bound", **scores, "epsilon": 0.01}
    assert bound.run(bound.Request.model_validate(claimed), RunContext()).stored()["violation"] is True
    biased = bound.run(
        bound.Request.model_validate(claimed | {"threshold_strategy": "in_sample"}), RunContext()
    ).stored()
    assert biased["violation"] is False and biased["verdict"] == "inconclusive"
    assert "no violation verdict" in biased["note"] and "in-sample" in biased["verdict_reason"]


def test_cli_bound_shows_both_bounds() -> None:
    runner = CliRunner()
    args = ["bound", "--tp", "900", "--fn", "100", "--fp", "100", "--tn", "900"]
    out = json.loads(runner.invoke(_cli(), [*args, "--json"]).stdout)
    assert (
        round(out["epsilon_empirical"], 1) == 12.2
        and round(out["epsilon_empirical_assumption_free"], 2) == 1.99
    )
    assert out["assumption"] == "none" and out["epsilon_lower"] == out["epsilon_empirical_assumption_free"]
    gdp = json.loads(runner.invoke(_cli(), [*args, "--assumption", "gdp", "--json"]).stdout)
    assert gdp["epsilon_lower"] == gdp["epsilon_empirical"]
    table = runner.invoke(_cli(), args)
    assert "epsilon_empirical_assumption_free" in table.stdout and "epsilon_lower" in table.stdout
    bad = runner.invoke(_cli(), [*args, "--assumption", "gaussian"])
    assert bad.exit_code == 2 and "--assumption" in bad.output


def test_cli_gaussian_warns_for_classic_above_the_crossover() -> None:
    runner = CliRunner()
    out = json.loads(runner.invoke(_cli(), ["accounting", "gaussian", "--epsilon", "10", "--json"]).stdout)
    assert out["calibration_valid"] is False and "analytic" in out["warning"]
    assert out["epsilon_exact_at_delta"] == pytest.approx(10.3939, abs=1e-4)
    fine = json.loads(
        runner.invoke(_cli(), ["accounting", "gaussian", "--epsilon", "10", "--analytic", "--json"]).stdout
    )
    assert fine["calibration_valid"] is True and fine["warning"] is None
    huge = runner.invoke(_cli(), ["accounting", "gaussian", "--epsilon", "1e308"])
    assert huge.exit_code == 2 and "--epsilon" in huge.output


def _api() -> TestClient:
    from app.api.handlers import install_error_handlers

    app = FastAPI()
    app.include_router(router)
    install_error_handlers(app)
    return TestClient(app, raise_server_exceptions=False)


def test_api_gaussian_warning_and_bounded_inputs() -> None:
    client = _api()
    classic = client.post("/v1/accounting/gaussian", json={"epsilon": 10})
    assert classic.status_code == 200 and classic.json()["calibration_valid"] is False
    assert "analytic" in classic.json()["warning"]
    assert classic.json()["epsilon_exact_at_delta"] == pytest.approx(10.3939, abs=1e-4)
    ok = client.post("/v1/accounting/gaussian", json={"epsilon": 1, "analytic": True}).json()
    assert ok["calibration_valid"] is True and ok["warning"] is None
    for body, path in [
        ({"epsilon": 1, "delta": 5e-324}, "$.delta"),
        ({"epsilon": 1.3454e308, "sensitivity": 1.1, "analytic": True, "delta": 0.66}, "$.epsilon"),
        ({"epsilon": 1e-308}, "$.epsilon"),
        ({"epsilon": 1, "analytic": 0}, "$.analytic"),
        ({"epsilon": 1, "analytic": "true"}, "$.analytic"),
        ({"epsilon": 1, "delta": 1}, "$.delta"),
        ({"epsilon": 1, "sensitivity": 1e300}, "$.sensitivity"),
    ]:
        response = client.post("/v1/accounting/gaussian", json=body)
        assert response.status_code == 422, body
        assert [d["path"] for d in response.json()["error"]["details"]] == [path]
    edge = client.post("/v1/accounting/gaussian", json={"epsilon": 1e-6, "delta": 1e-300, "sensitivity": 1e6})
    assert edge.status_code == 200 and edge.json()["sigma"] > 0  # a finite number, as the schema says


def test_api_synthetic_generation_infeasible_targets_name_the_field() -> None:
    client = _api()
    base = {"delta": 1e-5, "sequences": 1, "max_new_tokens": 1}
    for body in [
        base | {"batch_size": 1, "temperature": 1e6, "target_epsilon": 1e-6, "solve_for": "clip"},
        base | {"batch_size": 1, "clip": 1, "target_epsilon": 1e-3, "solve_for": "temperature"},
        base | {"clip": 1e6, "temperature": 1e-6, "target_epsilon": 1e-3, "solve_for": "batch_size"},
    ]:
        response = client.post("/v1/accounting/synthetic-generation", json=body)
        assert response.status_code == 422, response.text
        details = response.json()["error"]["details"]
        assert details[0]["path"] == "$.target_epsilon" and "target_epsilon" in details[0]["message"]
    for field, value in [
        ("clip", 1e300),
        ("temperature", 1e-300),
        ("sequences", 10**12),
        ("target_epsilon", 1e300),
    ]:
        body = {"clip": 1, "batch_size": 1, "temperature": 1} | {field: value}
        if field == "target_epsilon":
            body = {"clip": 1, "batch_size": 1, "target_epsilon": value, "solve_for": "temperature"}
        response = client.post("/v1/accounting/synthetic-generation", json=body)
        assert response.status_code == 422 and response.json()["error"]["details"][0]["path"] == f"$.{field}"
    # The extremes of the accepted ranges still answer with finite numbers.
    extreme = base | {"clip": 1e6, "batch_size": 1, "temperature": 1e-6, "sequences": 1_000_000}
    response = client.post("/v1/accounting/synthetic-generation", json=extreme)
    assert response.status_code == 200 and response.json()["epsilon"] > 0
