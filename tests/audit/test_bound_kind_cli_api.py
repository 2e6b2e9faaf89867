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

from app.api.accounting import router
from app.audit.kinds import bound
from app.audit.runtime import RunContext
from app.cli.science import register


def test_kind_with_counts_and_the_example() -> None:
    seen: list[tuple[str, float]] = []
    ctx = RunContext(progress=lambda stage, fraction, message="": seen.append((stage, fraction)))
    result = bound.run(bound.Request.model_validate(bound.EXAMPLE), ctx)
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
    split = bound.run(bound.Request.model_validate(body), RunContext())
    assert split["threshold_strategy"] == "split" and split["auc"] > 0.7 and "note" not in split
    biased = bound.run(bound.Request.model_validate(body | {"threshold_strategy": "in_sample"}), RunContext())
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
    g = client.post("/v1/accounting/gaussian", json={"epsilon": 1, "delta": 1e-5, "sensitivity": 2**0.5})
    assert g.status_code == 200 and g.json()["mu"] == pytest.approx(2**0.5 / g.json()["sigma"])
    assert client.post("/v1/accounting/gaussian", json={"epsilon": -1}).status_code == 422
