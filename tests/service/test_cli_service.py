"""The CLI against a real `iclaudit serve` (subprocess, SQLite, inline executor, auth off): submit
--watch shows progress and the result table; status; result as JSON and CSV; keys create/revoke."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service.servers import _die_with_parent, free_port
from typer.testing import CliRunner

from app.cli import _register, app
from app.config import get_settings

ROOT = Path(__file__).resolve().parents[2]
ICLAUDIT = Path(sys.executable).parent / "iclaudit"


@pytest.fixture(scope="module")
def cli() -> CliRunner:
    _register()
    return CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, str], Path]]:
    state = tmp_path_factory.mktemp("serve")
    env = {
        **os.environ,
        "ICLAUDIT_STATE_DIR": str(state),
        "ICLAUDIT_AUTH_ENABLED": "false",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("ICLAUDIT_DATABASE_URL", None)
    subprocess.run([str(ICLAUDIT), "migrate"], env=env, check=True, capture_output=True, cwd=state)
    port = free_port()
    log = state / "serve.log"
    proc = subprocess.Popen(
        [str(ICLAUDIT), "serve", "--port", str(port)],
        env=env,
        cwd=state,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: _die_with_parent(signal.SIGTERM),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(log.read_text())
        time.sleep(0.1)
    yield url, env, log
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)


def test_serve_logs_that_auth_is_off(server) -> None:
    assert "AUTHENTICATION IS OFF" in server[2].read_text()


def test_submit_watch_status_and_result(cli: CliRunner, server) -> None:
    url = server[0]
    out = cli.invoke(app, ["submit", str(ROOT / "examples/bound-counts.json"), "--watch", "--url", url])
    assert out.exit_code == 0, out.output
    assert "submitted bound audit" in out.output and "100%" in out.output
    audit_id = out.output.split("submitted bound audit ")[1].split()[0]
    assert "epsilon" in out.output  # the result table

    status = cli.invoke(app, ["status", audit_id, "--url", url])
    assert status.exit_code == 0 and "SUCCEEDED" in status.output

    as_json = cli.invoke(app, ["result", audit_id, "--url", url])
    result = json.loads(as_json.stdout)
    as_csv = cli.invoke(app, ["result", audit_id, "--url", url, "--format", "csv"])
    rows = list(csv.reader(io.StringIO(as_csv.stdout)))
    assert rows[0] == ["field", "value"] and len(rows) > 2
    first_scalar = next((k, v) for k, v in result.items() if not isinstance(v, dict | list))
    assert [first_scalar[0], str(first_scalar[1])] in rows


def test_submit_of_a_bad_request_exits_non_zero_with_the_reason(
    cli: CliRunner, server, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"kind": "bound", "counts": {"tp": 1}}))
    out = cli.invoke(app, ["submit", str(bad), "--url", server[0]])
    assert out.exit_code == 2 and "422" in out.output and "required" in out.output


def test_keys_create_prints_once_and_revoke(cli: CliRunner, server) -> None:
    env = {"ICLAUDIT_STATE_DIR": server[1]["ICLAUDIT_STATE_DIR"]}
    get_settings.cache_clear()  # the commands read Settings from this environment
    created = cli.invoke(app, ["keys", "create", "--tenant", "acme"], env=env)
    assert created.exit_code == 0
    key = created.stdout.strip().splitlines()[-1]
    assert key.startswith("ica_")
    assert cli.invoke(app, ["keys", "revoke", key], env=env).exit_code == 0
    again = cli.invoke(app, ["keys", "revoke", key], env=env)
    assert again.exit_code == 1
    get_settings.cache_clear()
    with sqlite3.connect(Path(env["ICLAUDIT_STATE_DIR"]) / "iclaudit.db") as db:  # the server's database
        assert db.execute(
            "SELECT revoked_at IS NOT NULL FROM api_keys WHERE id = ?", (key.split("_")[1],)
        ).fetchone() == (1,)
