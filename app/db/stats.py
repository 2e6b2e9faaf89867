"""Aggregates for the operator's /metrics, computed in the database at scrape time (so they hold however
many API processes and workers there are): run time of finished audits by kind and outcome, in histogram
buckets, the violations found, by kind, and the verdicts (violation, leak, inconclusive, consistent), by
kind."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, Float, case, cast, func, select
from sqlalchemy.orm import Session

from app.db.audits import stored_outcome
from app.db.models import Audit, AuditState

FINISHED = (AuditState.SUCCEEDED, AuditState.FAILED, AuditState.CANCELLED)


@dataclass(frozen=True)
class DurationBuckets:
    kind: str
    state: str
    cumulative: list[int]  # audits with run time ≤ each bound, in the order of the bounds given
    count: int
    total_seconds: float


def _seconds(session: Session) -> ColumnElement[Any]:
    """finished_at − started_at in seconds, in the dialect's own date arithmetic."""
    if session.get_bind().dialect.name == "postgresql":
        return func.extract("epoch", Audit.finished_at - Audit.started_at)
    return (func.julianday(Audit.finished_at) - func.julianday(Audit.started_at)) * 86400.0


def duration_buckets(session: Session, bounds: Sequence[float]) -> list[DurationBuckets]:
    """Per (kind, final state): how many runs took at most each bound, their count and summed seconds."""
    seconds = cast(_seconds(session), Float)
    columns = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in bounds]
    rows = session.execute(
        select(Audit.kind, Audit.state, func.count(), func.coalesce(func.sum(seconds), 0.0), *columns)
        .where(Audit.state.in_(FINISHED), Audit.started_at.is_not(None), Audit.finished_at.is_not(None))
        .group_by(Audit.kind, Audit.state)
    )
    return [
        DurationBuckets(str(kind), str(state), [int(c or 0) for c in cum], int(n), float(total))
        for kind, state, n, total, *cum in rows
    ]


def violation_counts(session: Session) -> list[tuple[str, int]]:
    """(kind, audits whose result says `violation: true`) over SUCCEEDED audits, every tenant."""
    violated = Audit.result["violation"].as_boolean()
    rows = session.execute(
        select(Audit.kind, func.count())
        .where(Audit.state == AuditState.SUCCEEDED, violated.is_(True))
        .group_by(Audit.kind)
    )
    return [(str(kind), int(n)) for kind, n in rows]


def verdict_counts(session: Session) -> list[tuple[str, str, int]]:
    """(kind, verdict, audits) over SUCCEEDED audits whose result has a verdict, every tenant (a kind that
    measures no leakage, iclinf, has none and is left out)."""
    verdict = stored_outcome()
    rows = session.execute(
        select(Audit.kind, verdict, func.count())
        .where(Audit.state == AuditState.SUCCEEDED, verdict.is_not(None))
        .group_by(Audit.kind, verdict)
    )
    return [(str(kind), str(outcome), int(n)) for kind, outcome, n in rows]
