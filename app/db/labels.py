"""Audit labels as rows (a copy of the request's `labels`), so a label filter is an indexed lookup."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_, exists
from sqlalchemy.orm import Session

from app.db.models import Audit, AuditLabel


def add_labels(session: Session, *, audit_id: str, labels: dict[str, str]) -> None:
    session.add_all(AuditLabel(audit_id=audit_id, key=k, value=v) for k, v in labels.items())


def having_labels(labels: dict[str, str]) -> list[Any]:
    """WHERE clauses on `audits`: every (key, value) given is one of the audit's labels."""
    return [
        exists().where(and_(AuditLabel.audit_id == Audit.id, AuditLabel.key == k, AuditLabel.value == v))
        for k, v in labels.items()
    ]
