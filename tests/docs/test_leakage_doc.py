"""docs/results/leakage.md is what docs/results/leakage.py prints: every row of its tables comes from the runs
file by `--report`, every request file the script names exists and validates, and `--plot` draws both ROC
figures (the script's logic on the committed runs; the SmolLM2 runs themselves are not repeated here)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.audit.kinds.mia import Request
from testkit.scripts import load_script, missing_from


@pytest.fixture(scope="module")
def leakage():
    return load_script("docs/results/leakage.py")


def test_every_table_row_of_the_doc_is_printed_from_the_runs_file(leakage) -> None:
    rows = [line for line in leakage.report().splitlines() if line.startswith("| ")]
    runs = {json.loads(line)["name"] for line in leakage.RUNS.read_text().splitlines()}
    assert len([r for r in rows if r.split("|")[1].strip() in runs]) >= len(leakage.NAMES)
    missing = missing_from("docs/results/leakage.md", rows)
    assert missing == [], "leakage.md is stale; rerun `docs/results/leakage.py --report`:\n" + "\n".join(
        missing
    )


def test_every_named_run_has_a_valid_request_file(leakage) -> None:
    for name in (*leakage.NAMES, *leakage.GENERATED):
        Request.model_validate_json(leakage.request_file(name).read_text())


def test_tpr_below_the_trials_resolution_is_printed_unresolved(leakage) -> None:
    assert leakage._tpr(None, 25) == "unresolved (n C0 = 25)" and leakage._tpr(0.875, 100) == "0.875"
    fpr, tpr = leakage.roc(np.array([1.0, 0.0]), np.array([0.0, 0.0]))
    assert (fpr[0], tpr[0]) == (0.0, 0.5) and (fpr[-1], tpr[-1]) == (1.0, 1.0)


def test_both_roc_figures_are_drawn_with_a_panel_per_secret_or_attack(leakage, tmp_path, monkeypatch) -> None:
    from PIL import Image

    monkeypatch.setattr(leakage, "PLOT", tmp_path / "likelihood.png")
    monkeypatch.setattr(leakage, "PLOT_GENERATED", tmp_path / "generated.png")
    leakage.plots()
    for name in ("likelihood.png", "generated.png"):
        with Image.open(tmp_path / name) as image:
            width, height = image.size
        assert width > 1.8 * height  # two panels side by side
