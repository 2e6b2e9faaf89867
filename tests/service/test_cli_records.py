"""`iclaudit result ID --records` against a real `iclaudit serve`: the per-record table of a 20-canary audit."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from app.cli import _register, app
from testkit.servers import _die_with_parent, free_port

ROOT = Path(__file__).resolve().parents[2]
ICLAUDIT = Path(sys.executable).parent / "iclaudit"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """`iclaudit serve` on SQLite, inline executor, auth off (as tests/service/test_cli_service.py)."""
    state = tmp_path_factory.mktemp("serve")
    env = {**os.environ, "ICLAUDIT_STATE_DIR": str(state), "ICLAUDIT_AUTH_ENABLED": "false"}
    env |= {"ICLAUDIT_PRELOAD_MODELS": "false", "HF_HUB_OFFLINE": "1"}
    env.pop("ICLAUDIT_DATABASE_URL", None)
    subprocess.run([str(ICLAUDIT), "migrate"], env=env, check=True, capture_output=True, cwd=state)
    port, log = free_port(), state / "serve.log"
    proc = subprocess.Popen(
        [str(ICLAUDIT), "serve", "--port", str(port)],
        env=env,
        cwd=state,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: _die_with_parent(signal.SIGTERM),
    )
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + 240
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(log.read_text())
        time.sleep(0.2)
    yield url
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
