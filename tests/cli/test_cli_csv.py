"""`iclaudit result ID --format csv` escapes formula cells as the API's CSV does (one function,
iclaudit/csv_cells.py): a canary text the tenant chose comes back in the result, and a spreadsheet opening
the CLI's CSV shows it as text instead of running it."""

from __future__ import annotations

import csv
import io
import subprocess

import httpx
from cli.test_cli_service import ICLAUDIT, server  # noqa: F401 - the module's `iclaudit serve`

from testkit.client import long_mia_request, wait_for

FORMULA = "@SUM(1+1)*cmd|' /C calc'!A0"


def test_result_csv_escapes_formula_cells(server) -> None:  # noqa: F811
    url = server[0]
    body = long_mia_request(trials=200) | {"attack": {"name": "canary_prompt", "canary": FORMULA}}
    with httpx.Client(base_url=url) as client:
        submitted = client.post("/v1/audits", json=body)
        assert submitted.status_code == 202, submitted.text
        audit_id = submitted.json()["id"]
        done = wait_for(client.get, audit_id, timeout=180)
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["result"]["canary"] == FORMULA  # the tenant's text is in the result
    out = subprocess.run(
        [str(ICLAUDIT), "result", audit_id, "--format", "csv", "--url", url],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = dict(row for row in csv.reader(io.StringIO(out.stdout)) if len(row) == 2)
    assert rows["canary"] == "'" + FORMULA  # shown as text by Excel, LibreOffice and Google Sheets
    assert not any(v.startswith(("=", "+", "@", "\t", "\r")) for v in rows.values())
    numbers = [v for v in rows.values() if v.startswith("-")]
    assert all(float(v) < 0 for v in numbers)  # a negative number stays a number
