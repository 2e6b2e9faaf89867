"""Stored target responses: every answered call of an audit, keyed by its lineage (the first
audit of a resume chain) and the exact request, and the resume links between audits."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session, sessionmaker

from app.db.models import AuditResume, TargetResponse
from app.db.retry import in_transaction


def lineage_of(session: Session, audit_id: str) -> str:
    """The first audit of `audit_id`'s resume chain (itself when it resumes nothing)."""
    lineage = session.scalar(select(AuditResume.lineage_id).where(AuditResume.audit_id == audit_id))
    return lineage or audit_id


def link_resume(session: Session, *, audit_id: str, resumed_from: str) -> None:
    """Record that `audit_id` resumes `resumed_from` (and so replays its lineage's responses)."""
    session.add(
        AuditResume(
            audit_id=audit_id, lineage_id=lineage_of(session, resumed_from), resumed_from=resumed_from
        )
    )


def count(session: Session, lineage_id: str) -> int:
    from sqlalchemy import func

    return int(session.scalar(select(func.count()).where(TargetResponse.lineage_id == lineage_id)) or 0)


def stored_bytes(session: Session, lineage_id: str) -> int:
    """Bytes of the answers stored for `lineage_id` (their JSON text)."""
    from sqlalchemy import Text, cast, func

    total = session.scalar(
        select(func.sum(func.length(cast(TargetResponse.answer, Text)))).where(
            TargetResponse.lineage_id == lineage_id
        )
    )
    return int(total or 0)


class DbResponses:
    """The runner's ResponseStore for one audit (app/audit/runtime.py): reads and writes its lineage's rows,
    each in a brief transaction retried through transient errors; a key already stored is kept. `max_bytes`
    caps the answers' bytes (JSON) the lineage holds: a write that would pass it is refused whole (an
    AuditError naming the cap), so the table never holds more."""

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        audit_id: str,
        *,
        max_seconds: float = 120.0,
        max_bytes: int | None = None,
    ):
        self._sessions = session_factory
        self._audit_id = audit_id
        self._max_seconds = max_seconds
        self._max_bytes = max_bytes
        self._bytes: int | None = None  # stored for the lineage, read at the first write
        self._lineage: str | None = None

    def _lineage_id(self, session: Session) -> str:
        if self._lineage is None:
            self._lineage = lineage_of(session, self._audit_id)
        return self._lineage

    def get(self, keys: Iterable[str]) -> dict[str, Any]:
        wanted = list(keys)

        def read(session: Session) -> dict[str, Any]:
            lineage = self._lineage_id(session)
            found: dict[str, Any] = {}
            for start in range(0, len(wanted), 500):
                rows = session.execute(
                    select(TargetResponse.key, TargetResponse.answer).where(
                        TargetResponse.lineage_id == lineage,
                        TargetResponse.key.in_(wanted[start : start + 500]),
                    )
                )
                found.update({key: answer for key, answer in rows})
            return found

        return in_transaction(
            self._sessions, read, max_seconds=self._max_seconds, what="target responses: read"
        )

    def put(self, answers: Mapping[str, Any]) -> None:
        if not answers:
            return
        if self._max_bytes is not None:
            import json

            from app.audit.runtime import AuditError

            if self._bytes is None:
                self._bytes = in_transaction(
                    self._sessions,
                    lambda session: stored_bytes(session, self._lineage_id(session)),
                    max_seconds=self._max_seconds,
                    what="target responses: size",
                )
            size = sum(len(json.dumps(v)) for v in answers.values())  # as the JSON column writes it
            if self._bytes + size > self._max_bytes:
                raise AuditError(
                    f"the target answers this audit stores for resume would pass {self._max_bytes:,} bytes "
                    f"({self._bytes:,} stored, {size:,} more), this service's cap per audit "
                    "(ICLAUDIT_TARGET_MAX_STORED_BYTES); nothing more was stored"
                )
            self._bytes += size

        def write(session: Session) -> None:
            lineage = self._lineage_id(session)
            rows = [{"lineage_id": lineage, "key": k, "answer": v} for k, v in answers.items()]
            insert = pg_insert if session.get_bind().dialect.name == "postgresql" else sqlite_insert
            from app.db.models import utcnow

            now = utcnow()
            session.execute(
                insert(TargetResponse)
                .values([row | {"created_at": now} for row in rows])
                .on_conflict_do_nothing(index_elements=["lineage_id", "key"])
            )

        in_transaction(self._sessions, write, max_seconds=self._max_seconds, what="target responses: write")


def purge_lineages(session: Session, audit_ids: Iterable[str]) -> int:
    """Delete the stored target responses of the lineages `audit_ids` begin (a dataset's purge)."""
    from sqlalchemy import delete

    ids = list(audit_ids)
    deleted = 0
    for start in range(0, len(ids), 500):
        result = session.execute(
            delete(TargetResponse).where(TargetResponse.lineage_id.in_(ids[start : start + 500]))
        )
        deleted += int(result.rowcount or 0)  # type: ignore[attr-defined]
    return deleted


def purge_older_than(session: Session, *, before: datetime) -> int:
    """Delete the target responses stored before `before` (ICLAUDIT_RESPONSE_RETENTION_SECONDS); a DELETE
    only when there are some (a write ends this process's kept poll answers, app.jobs.writes)."""
    from sqlalchemy import delete, exists

    old = TargetResponse.created_at < before
    if not session.scalar(select(exists().where(old))):
        return 0
    return int(session.execute(delete(TargetResponse).where(old)).rowcount or 0)  # type: ignore[attr-defined]
