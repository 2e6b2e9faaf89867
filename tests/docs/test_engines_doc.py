"""docs/results/engines.md's peer table is `bench/suites/engines.py`'s `report()` of the committed run
(docs/results/engines-peers.jsonl), and the report reads the suite's rows as the suite writes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.scripts import load_script, missing_from

ROOT = Path(__file__).resolve().parents[2]
_engines = load_script("bench/suites/engines.py")
PEERS, report = _engines.PEERS, _engines.report
RUN = ROOT / "docs/results/engines-peers.jsonl"


def test_the_doc_prints_the_committed_run() -> None:
    rows = [json.loads(line) for line in RUN.read_text().splitlines() if line.strip()]
    assert {r["engine"] for r in rows if r["name"].startswith("peers_")} == set(PEERS)
    missing = missing_from("docs/results/engines.md", report(rows).splitlines())
    assert missing == [], "engines.md is stale; paste report() of the committed run:\n" + "\n".join(missing)


def test_report_compares_each_engine_with_the_default_on_the_same_workload() -> None:
    rows = [
        {"name": f"peers_voting_{e}", "engine": e, "workload": "voting", "threads": 2, "value": v, "sequences": 4,
         "tokens": 100, "tokens_per_s": 100 / v, "max_abs_diff_vs_transformers": d, "load_avg_1m": [1, 2]}
        for e, v, d in (("transformers", 2.0, 0.0), ("vllm", 1.0, 1e-4), ("llama_cpp", 4.0, 0.2))
    ]  # fmt: skip
    lines = report(rows).splitlines()
    assert lines[2].startswith("| voting | 2 | transformers | 4 | 100 | 2.00 | 50 | 1.00 |")
    assert "| 0.50 |" in lines[3] and "| 2.00 |" in lines[4]


@pytest.mark.slow
def test_without_the_extras_the_peers_are_skipped_with_a_message(monkeypatch, tmp_path) -> None:
    """Where .venv-extras is not built, `bench/run.py engines` says so and measures the default alone."""
    missing = tmp_path / "no-extras"
    monkeypatch.setattr(_engines, "EXTRAS_VENV", missing)
    monkeypatch.setenv(_engines.LLAMA_CPP_PYTHON, str(missing / "bin" / "python"))
    # a small run: one thread count, one context pair, one record
    for name, value in (("PEER_THREADS", (1,)), ("PEER_PAIRS", 1), ("LIKELIHOOD_RECORDS", 1)):
        monkeypatch.setattr(_engines, name, value)
    assert _engines._llama_cpp_python() is None
    rows = list(_engines.peers())
    assert rows[0]["name"] == "peers_skipped" and str(missing) in rows[0]["message"]
    measured = rows[1:]
    assert [(r["workload"], r["engine"], r["threads"]) for r in measured] == [
        ("voting", "transformers", 1),
        ("likelihood", "transformers", 1),
    ]
    assert all(r["value"] > 0 and "ratio" not in r for r in measured)
    assert measured[0]["sequences"] == 2 * _engines.PEER_T
