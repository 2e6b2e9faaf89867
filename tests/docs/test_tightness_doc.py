"""docs/results/tightness.md is what docs/results/tightness.py prints from its committed runs file, and every
request file it names validates and names the real mechanism with analytic calibration and no planted bug."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.audit.kinds.mia import Request
from testkit.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tightness():
    return load_script("docs/results/tightness.py")


def test_the_doc_is_what_the_script_prints(tightness) -> None:
    doc = (ROOT / "docs/results/tightness.md").read_text()
    assert doc == tightness.report(), "tightness.md is stale; rerun `docs/results/tightness.py --report`"


def test_every_row_has_a_run_and_a_valid_request_file(tightness) -> None:
    runs = (
        tightness._load()
    )  # the runs by their rows' names (a `_constrained` line is its label_logprobs row)
    for name in tightness.ROWS:
        assert name in runs
        request = Request.model_validate_json(tightness.request_file(name).read_text())
        assert request.mechanism.name == "private_voting" and request.mechanism.calibration == "analytic"
        assert request.mechanism.bug is None and request.model == "smollm2-135m-instruct"


def test_every_grid_cell_has_a_valid_request_file(tightness) -> None:
    """The every-seed grid: `auto` against label_logprobs teachers, each dataset × seed × ε, one request file
    per cell (whether or not its run is in the runs file yet: the doc lists the missing cells)."""
    assert len(tightness.GRID) == len(tightness.GRID_DATASETS) * len(tightness.GRID_SEEDS) * 3
    for name in tightness.GRID:
        request = Request.model_validate_json(tightness.request_file(name).read_text())
        assert request.attack.name == "auto" and request.mechanism.teacher_output == "label_logprobs"
        assert request.mechanism.calibration == "analytic" and request.mechanism.bug is None
        assert name == f"{request.dataset}-auto-label_logprobs-seed{request.seed}-eps{request.epsilon:g}"
