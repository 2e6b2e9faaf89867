"""The HTML report (app/reports/html.py) of a real audit over several canaries: self-contained (no script, no
link, nothing to fetch), with its per-record table, its evidence and one chart each for the result, the records
and the sampled trials. The browser test (test_tracking_browser.py) opens one from file:// offline."""

from __future__ import annotations

import json
import re
from pathlib import Path

from app.audit.standalone import run_request
from app.reports import html as report

ROOT = Path(__file__).resolve().parents[2]


def test_a_report_over_several_canaries_holds_everything_inline() -> None:
    request = json.loads((ROOT / "examples" / "likelihood-oracle-records.json").read_text())
    result = run_request(request)
    page = report.render({"id": "a" * 32, "kind": "mia", "request": request, "result": result})
    assert "<script" not in page and "<link" not in page and "@import" not in page
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)  # nothing loads from anywhere
    assert page.count('src="data:image/png;base64,') == 3  # the result, the records, the sampled trials
    records = re.search(r'<table id="report-records"[^>]*>.*?</table>', page, re.S)
    assert records and records.group(0).count("<tr>") == 1 + len(result["records"])
    assert page.count('class="evidence"') == len(result["evidence"]["records"])
    assert result["headline"] in page and "ContextLeak" in page and "Tight and Practical" in page
    assert "@media print" in page and "@page" in page
