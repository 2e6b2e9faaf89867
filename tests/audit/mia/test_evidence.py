"""The bounded evidence sample of a mia result (app/audit/attacks/evidence.py): the record, the query, the first
trials of C1 beside C0, read from the audit's own trials, so no other field of the result changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.audit.attacks import evidence
from app.audit.kinds import mia
from app.audit.results.mia import MiaAuditResult
from app.audit.standalone import run_request

ROOT = Path(__file__).resolve().parents[3]


def _example(name: str, **override) -> dict:
    return json.loads((ROOT / "examples" / name).read_text()) | {"dataset": "synthetic_records"} | override


@pytest.mark.parametrize(
    ("name", "records"),
    [("mia-oracle-eps1.json", 1), ("likelihood-oracle-records.json", evidence.MAX_RECORDS)],
)
def test_evidence_is_bounded_and_changes_no_other_field(monkeypatch, name: str, records: int) -> None:
    body = _example(name, trials=4000) if name.startswith("mia") else _example(name)
    with_evidence = run_request(body)
    sample = with_evidence.pop("evidence")
    # The same audit with the sample not taken at all: every other field equal, to the last digit.
    monkeypatch.setattr(mia, "_evidence", lambda setup, trials: None)
    monkeypatch.setattr(evidence, "several_canaries", lambda *a: None)
    without = run_request(body)
    assert without.pop("evidence") is None
    assert with_evidence == without
    assert len(sample["records"]) == records
    for record in sample["records"]:
        assert 0 < len(record["c1"]) <= evidence.MAX_TRIALS and len(record["c0"]) == len(record["c1"])
        assert record["text"] and len(record["text"]) <= evidence.MAX_CHARS
    assert len(json.dumps(sample)) < 16_000
    assert MiaAuditResult.model_validate({**with_evidence, "evidence": sample}).evidence is not None


def test_one_canarys_sample_is_the_canary_its_query_and_its_partition_prompts() -> None:
    result = run_request(_example("mia-oracle-eps1.json", trials=4000))
    record = result["evidence"]["records"][0]
    assert record["text"] == evidence.cut(result["canary"])
    assert record["query"] and result["evidence"]["positive_answer"] == "Yes"
    assert record["prompt_in"] != record["prompt_out"]  # the canary's partition with and without it
    # The decision is the release's answer; the white-box score is the attack's.
    for side in ("c1", "c0"):
        for trial in record[side]:
            assert trial["decision"] in ("in", "out") and isinstance(trial["score"], float)
            assert trial["released"] == ("Yes" if trial["decision"] == "in" else "another answer")
