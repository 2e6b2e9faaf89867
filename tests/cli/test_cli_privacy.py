"""The `iclaudit` command against a real `iclaudit serve`: datasets by name (upload twice: a new version, said
so; the list shows the whole id at 80 columns; a request names the dataset), and record text redacted in
`result --records` and `--format html` unless `--show-records`."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from cli.test_cli_records import server  # noqa: F401 - the `iclaudit serve` fixture

from testkit.client import white_box_request
from testkit.served import ICLAUDIT

EMAILS = [f"client{i}@example.org" for i in range(12)]


def _cli(url: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "80", "ICLAUDIT_URL": url}
    env.pop("ICLAUDIT_API_KEY", None)
    return subprocess.run(
        [str(ICLAUDIT), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=300
    )


def test_datasets_by_name_and_records_redacted_unless_asked(server: str, tmp_path: Path) -> None:  # noqa: F811
    tickets = tmp_path / "tickets.jsonl"
    rows = [{"text": f"Ticket {i}: reply to {EMAILS[i]} about order {i}"} for i in range(12)]
    tickets.write_text("\n".join(json.dumps(r) for r in rows))
    first = _cli(server, "datasets", "upload", str(tickets), "--name", "helpdesk", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = _cli(server, "datasets", "upload", str(tickets), "--name", "helpdesk", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    first_id, second_id = first.stdout.strip(), second.stdout.strip()
    assert "'helpdesk' v2" in second.stderr and f"replaces {first_id}" in second.stderr

    listed = _cli(server, "datasets", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert first_id in listed.stdout and second_id in listed.stdout  # whole, at 80 columns
    assert max(len(line) for line in listed.stdout.splitlines()) <= 80

    request = tmp_path / "request.json"
    request.write_text(json.dumps(white_box_request("helpdesk", 3, 2)))
    submitted = _cli(server, "submit", str(request), "--watch", "--allow-inconclusive", cwd=tmp_path)
    assert submitted.returncode in (0, 1), submitted.stdout + submitted.stderr
    audit_id = re.search(r"submitted mia audit ([0-9a-f]{32})", submitted.stdout + submitted.stderr)[1]
    status = _cli(server, "status", audit_id, "--format", "json", cwd=tmp_path)
    assert json.loads(status.stdout)["request"]["dataset"] == second_id

    def emails(text: str) -> int:
        return sum(e in text for e in EMAILS)

    redacted = _cli(server, "result", audit_id, "--records", "--format", "csv", cwd=tmp_path)
    assert redacted.returncode == 0 and emails(redacted.stdout) == 0 and "[email]" in redacted.stdout
    shown = _cli(server, "result", audit_id, "--records", "--format", "csv", "--show-records", cwd=tmp_path)
    assert shown.returncode == 0 and emails(shown.stdout) == 3
    report = _cli(server, "result", audit_id, "--format", "html", "-o", "report.html", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    text = (tmp_path / "report.html").read_text()
    assert emails(text) == 0 and "--show-records" in text and "helpdesk v2" in text
    full = _cli(server, "result", audit_id, "--format", "html", "--show-records", cwd=tmp_path)
    assert full.returncode == 0 and emails(full.stdout) >= 3
