"""docs/results/mia.md is what docs/results/mia_runs.py prints from its committed raw runs
(docs/results/mia-runs.jsonl): every table row of `--report` is in the page, every run's request is the
script's own and validates, and the tightness rows audit the white box alone (as the page says)."""

from __future__ import annotations

import pytest

from app.audit.kinds.mia import Request
from testkit.scripts import load_script, missing_from


@pytest.fixture(scope="module")
def mia_runs():
    return load_script("docs/results/mia_runs.py")


def test_every_table_row_of_the_doc_is_printed_from_the_runs_file(mia_runs) -> None:
    rows = [line for line in mia_runs.report().splitlines() if line.startswith("| ")]
    assert len(rows) >= 20
    missing = missing_from("docs/results/mia.md", rows)
    assert missing == [], "mia.md is stale; rerun `docs/results/mia_runs.py --report`:\n" + "\n".join(missing)


def test_every_run_is_a_row_of_the_script_with_its_request(mia_runs) -> None:
    runs = mia_runs.load()
    assert set(runs) == set(mia_runs.ROWS)
    for name, run in runs.items():
        assert run["request"] == mia_runs.ROWS[name]
        Request.model_validate(run["request"])
        if name.startswith("oracle_eps"):
            assert run["request"]["attack"]["threat_model"] == "white_box"
            assert "black_box" not in run["result"]
