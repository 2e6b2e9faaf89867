"""Migration 0008 on both dialects: uploads that already share a name are numbered in upload order, and the
(tenant, name, version) index then refuses a second row of one version."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from app.db.engine import make_engine
from app.db.migrate import upgrade


def _insert(connection, row_id: str, tenant: str, name: str, at: datetime) -> None:
    connection.execute(
        text(
            "INSERT INTO datasets (id, tenant_id, name, format, task, labels, n_train, n_test, size_bytes,"
            " content, created_at) VALUES (:id, :tenant, :name, 'jsonl', 'classification', '[]', 1, 1, 1,"
            " :content, :at)"
        ),
        {"id": row_id, "tenant": tenant, "name": name, "content": b"x", "at": at},
    )


def test_existing_uploads_sharing_a_name_are_numbered_in_upload_order(empty_url: str) -> None:
    upgrade(empty_url, "0007")
    engine = make_engine(empty_url)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        with engine.begin() as connection:
            for tenant in ("ta", "tb"):
                connection.execute(
                    text("INSERT INTO tenants (id, name, created_at) VALUES (:id, :id, :at)"),
                    {"id": tenant, "at": start},
                )
            _insert(connection, "a3", "ta", "support", start + timedelta(hours=3))
            _insert(connection, "a1", "ta", "support", start + timedelta(hours=1))
            _insert(connection, "a2", "ta", "support", start + timedelta(hours=2))
            _insert(connection, "a9", "ta", "other", start)
            _insert(connection, "b1", "tb", "support", start + timedelta(hours=5))
        upgrade(empty_url)
        with engine.begin() as connection:
            versions = dict(connection.execute(text("SELECT id, version FROM datasets")).all())
        assert versions == {"a1": 1, "a2": 2, "a3": 3, "a9": 1, "b1": 1}
        with pytest.raises(IntegrityError), engine.begin() as connection:
            _insert(connection, "a4", "ta", "support", start)  # version 1 again
    finally:
        engine.dispose()
