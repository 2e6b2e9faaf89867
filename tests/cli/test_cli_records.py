"""`iclaudit result ID --records` against a real `iclaudit serve`: the per-record table of a 20-canary audit."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import _register, app
from testkit.served import serve, stop

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`iclaudit serve` on SQLite, inline executor, auth off (as tests/cli/test_cli_service.py)."""
    proc, url, _ = serve(tmp_path_factory.mktemp("serve"), auth=False, ready_within=240)
    yield url
    stop(proc)


def test_result_records_as_csv_json_and_table(server: str, tmp_path: Path) -> None:
    _register()
    cli, url = CliRunner(), server
    request = str(ROOT / "examples/likelihood-oracle-records.json")
    out = cli.invoke(app, ["submit", request, "--watch", "--url", url])
    assert out.exit_code == 1, out.output  # plain ICL, nothing claimed: every record leaks
    assert out.stdout.strip().splitlines()[-1].startswith("Plain ICL leaks: ε ≥ ")
    audit_id = out.output.split("submitted mia audit ")[1].split()[0]

    as_csv = cli.invoke(app, ["result", audit_id, "--records", "--format", "csv", "--url", url])
    assert as_csv.exit_code == 0, as_csv.output
    rows = list(csv.DictReader(io.StringIO(as_csv.stdout)))
    assert len(rows) == 20 and [int(r["rank"]) for r in rows] == list(range(1, 21))
    as_json = json.loads(cli.invoke(app, ["result", audit_id, "--records", "--url", url]).stdout)
    assert [r["record_id"] for r in as_json] == [r["record_id"] for r in rows]
    table = cli.invoke(app, ["result", audit_id, "--records", "--format", "table", "--url", url])
    assert table.exit_code == 0 and "20 flagged" in table.output and rows[0]["record_id"] in table.output
    png = cli.invoke(app, ["result", audit_id, "--records", "--format", "png", "-o", str(tmp_path / "x.png")])
    assert png.exit_code != 0 and "--records has no png" in png.output
