"""One engine factory for SQLite (the embedded default) and Postgres (psycopg 3).

SQLite gets WAL journaling, foreign keys and a busy timeout on every connection so that the API and the
in-process executor's threads can share one file.

Each process opens separate engines for separate callers (the API's requests; the runner, heartbeat and
sweep), so that one can never exhaust the other's pool. A server engine (Postgres) checks a pooled
connection before use (`pool_pre_ping`), so a connection broken by a database restart is replaced instead
of failing the next query, and retries opening a connection while the server restarts
(`connect_retry_seconds`); a SQLite file has no server to lose, so it skips the ping (a query saved on
every checkout, i.e. every request).
Postgres sessions get `lock_timeout`, so a write stuck behind a held row lock fails (transiently) instead
of waiting for ever.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from app.db.retry import retrying
from app.secrets import SCRUBBER

LOCK_TIMEOUT_MS = 5000
CONNECT_TIMEOUT_S = 5


def make_engine(
    url: str,
    *,
    pool_size: int = 5,
    max_overflow: int = 5,
    pool_timeout: float = 30.0,
    connect_retry_seconds: float = 0.0,
    name: str = "iclaudit",
) -> Engine:
    """An engine for `url` with a pool of `pool_size` (+ `max_overflow`) connections; for a SQLite file
    its directory is created and the pragmas set per connection."""
    parsed = make_url(url)
    pooling: dict[str, Any] = {
        "pool_size": pool_size,
        "max_overflow": max_overflow,
        "pool_timeout": pool_timeout,
        "pool_pre_ping": parsed.get_backend_name() != "sqlite",
    }
    if parsed.get_backend_name() != "sqlite":
        engine = create_engine(
            url,
            connect_args={
                "connect_timeout": CONNECT_TIMEOUT_S,
                "application_name": name,
                "options": f"-c lock_timeout={LOCK_TIMEOUT_MS}",
            },
            **pooling,
        )
    else:
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30}, **pooling)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA busy_timeout=30000")
            cursor.close()

    if connect_retry_seconds > 0:

        @event.listens_for(engine, "do_connect")
        def _connect_with_retry(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
            for attempt in retrying(connect_retry_seconds, what=f"{name}: connect"):
                with attempt:
                    return dialect.connect(*cargs, **cparams)
            return None  # pragma: no cover

    event.listen(engine, "before_cursor_execute", _scrubbed_parameters, retval=True)
    return engine


def _scrubbed_parameters(
    conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, executemany: bool
) -> tuple[str, Any]:
    """Every row this process writes (INSERT, UPDATE) passes through the secret scrubber (app/secrets.py):
    a resolved target secret never reaches the database, whatever text carried it (an error, a result, a
    stored reply). A no-op until this process has resolved a secret."""
    if not SCRUBBER.active or statement.lstrip()[:6].upper() not in ("INSERT", "UPDATE"):
        return statement, parameters
    return statement, _scrub_params(parameters)


def _scrub_params(value: Any) -> Any:
    if isinstance(value, str):
        clean = SCRUBBER.text(value)
        if clean != value and value[:1] in "{[":  # a JSON column's text: masked inside its strings only
            try:
                return json.dumps(SCRUBBER.value(json.loads(value)))
            except ValueError:
                pass
        return clean
    if isinstance(value, dict):
        return {k: _scrub_params(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_scrub_params(v) for v in value)
    if hasattr(value, "obj") and hasattr(value, "dumps"):  # psycopg's Json/Jsonb wrapper of a JSON column
        return type(value)(SCRUBBER.value(value.obj), value.dumps)
    return value


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions that keep loaded attributes after commit (rows are returned to callers after commit)."""
    return sessionmaker(engine, expire_on_commit=False)
