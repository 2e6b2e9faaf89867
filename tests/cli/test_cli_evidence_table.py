"""The terminal result table shows a membership audit's evidence as a short table (record · C1 · C0), never
the Python repr of its trials: a real audit over several canaries on the oracle engine."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from app.audit.kinds.registry import result_model
from app.audit.standalone import run_request
from iclaudit.cli.rendering import result_table

ROOT = Path(__file__).resolve().parents[2]


def test_the_result_table_shows_the_evidence_as_a_short_table() -> None:
    request = json.loads((ROOT / "examples" / "likelihood-oracle-records.json").read_text())
    result = result_model("mia").model_validate(run_request(request))
    assert result.evidence is not None and result.evidence.records
    for explain, width in ((True, 160), (False, 100)):
        console = Console(file=io.StringIO(), width=width, record=True)
        console.print(result_table(result, "likelihood audit", explain=explain))
        text = console.export_text()
        assert "Evidence(" not in text and "Trial(" not in text and "Record(" not in text, text
        assert "C1: record in" in text and "C0: record out" in text
        rows = [
            line for line in text.splitlines() if any(r.record_id in line for r in result.evidence.records)
        ]
        assert len(rows) == len(result.evidence.records), text
        # each side summed up: the mean white-box score of this white-box attack
        assert all(line.count("score ") == 2 for line in rows), rows
