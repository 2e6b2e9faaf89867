"""The transient-error classifier on real errors: SQLite's lock and a full pool are retried; a missing
table, a constraint and a syntax error are the caller's own and never retried (PostgreSQL's disconnects and
restarts are classified in tests/deploy/test_faults.py)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from sqlalchemy import create_engine, exc, text

from app.db.engine import make_engine, make_session_factory
from app.db.retry import in_transaction, is_transient


def _error(engine, sql: str) -> Exception:
    with pytest.raises(exc.SQLAlchemyError) as caught, engine.begin() as conn:
        conn.execute(text(sql))
    return caught.value


def test_caller_errors_are_not_transient(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (id INTEGER PRIMARY KEY)"))
        conn.execute(text("INSERT INTO t VALUES (1)"))
    assert not is_transient(_error(engine, "SELECT * FROM missing"))
    assert not is_transient(_error(engine, "INSERT INTO t VALUES (1)"))
    assert not is_transient(_error(engine, "SELEC 1"))
    engine.dispose()


def test_a_locked_database_and_a_full_pool_are_transient(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (id INTEGER)")
    holder.execute("BEGIN EXCLUSIVE")
    engine = create_engine(f"sqlite:///{path}", connect_args={"timeout": 0.05})
    locked = _error(engine, "INSERT INTO t VALUES (1)")
    assert "locked" in str(locked) and is_transient(locked)
    holder.execute("ROLLBACK")

    pooled = make_engine(f"sqlite:///{path}", pool_size=1, max_overflow=0, pool_timeout=0.05)
    with pooled.connect(), pytest.raises(exc.TimeoutError) as full:
        pooled.connect()
    assert is_transient(full.value)
    # and a transaction retried through the lock commits once it is released
    holder.execute("BEGIN EXCLUSIVE")
    sessions = make_session_factory(engine)
    tries = []

    def insert(session) -> int:
        tries.append(1)
        if len(tries) == 3:
            holder.execute("ROLLBACK")
        session.execute(text("INSERT INTO t VALUES (7)"))
        return len(tries)

    assert in_transaction(sessions, insert, max_seconds=10, what="test") >= 3
    assert holder.execute("SELECT id FROM t").fetchall() == [(7,)]
    holder.close()
    engine.dispose()
    pooled.dispose()
