"""The evidence of a membership audit as a short terminal table: one row per record, its sampled trials with
the record in (C1) beside those without it (C0), each side summed up in a few words. The trials themselves
are on the audit page, in the HTML report and in `--format json`; a table cell never holds a Python repr."""

from __future__ import annotations

from typing import Any

from rich.table import Table


def _plain(value: Any) -> Any:
    """A typed model (the server's distribution) or the light client's loose one → plain JSON values."""
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return value


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def side_summary(trials: list[dict[str, Any]]) -> str:
    """One side's sampled trials in a few words: how many the black-box test called "in", the mean output
    score of a released text, the mean white-box score (higher: the attack says "in")."""
    if not trials:
        return "—"
    parts = []
    decisions = [t.get("decision") for t in trials if t.get("decision") in ("in", "out")]
    if decisions:
        parts.append(f"in {decisions.count('in')}/{len(decisions)}")
    output = _mean([float(t["output"]) for t in trials if isinstance(t.get("output"), int | float)])
    if output is not None:
        parts.append(f"output {output:.3g}")
    score = _mean([float(t["score"]) for t in trials if isinstance(t.get("score"), int | float)])
    if score is not None:
        parts.append(f"score {score:.3g}")
    return " · ".join(parts) or f"{len(trials)} trials"


def evidence_table(evidence: Any) -> Table | None:
    """The result's `evidence` as record · C1 · C0 (None when it has no records)."""
    data = _plain(evidence)
    records = [_plain(r) for r in (data or {}).get("records") or []] if isinstance(data, dict) else []
    if not records:
        return None
    kept = data.get("max_trials")
    table = Table(
        caption=f"mean of the first {kept} trials a side; each in --format json" if kept else None,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("record", overflow="fold")
    table.add_column("C1: record in", overflow="fold")
    table.add_column("C0: record out", overflow="fold")
    for record in records:
        c1 = [_plain(t) for t in record.get("c1") or []]
        c0 = [_plain(t) for t in record.get("c0") or []]
        table.add_row(str(record.get("record_id", "—")), side_summary(c1), side_summary(c0))
    return table
