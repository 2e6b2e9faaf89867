"""Audits' marks read on the event loop, batched: the cheap validity check of a kept answer when other
processes write (several API processes and Celery workers on PostgreSQL).

A poll that holds a rendered answer for a running audit asks `MarkCheck.version(audit_id)`. The request
joins the next batch; one batch is one indexed `SELECT id, heartbeat_at, <mark> FROM audits WHERE id =
ANY(...)` on a connection of this process's own (at most two, autocommit), with no thread hop. A batch is
sent only after every request in it arrived (requests that come while a batch is in flight wait for the
next one), so the answer reflects every write committed before the poll began, by any process: a kept
answer is served only while its version (ETag and heartbeat) is the current one, never a stale state.
Under load the batches grow, so the queries per second stay near one per connection round trip however
many polls there are.

The mark is app.db.polling.MARK_FIELDS (state, progress, attempt, cancel flag, start and finish times),
read on a raw psycopg connection as a prepared statement (the same read through SQLAlchemy's async layer
cost about nine times the CPU), its times converted to UTC as app.db.models.UTCDateTime converts them, so
`app.api.watch.etag_of` gives the same ETag as from the API's own reads.

When the version has moved, `MarkCheck.audit(tenant_id, audit_id)` reads the whole row the same way (one
prepared `SELECT` of every column), so a running audit's new answer is rendered on the event loop from
what the API's own read would give, without a thread hop or a session.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import namedtuple
from collections.abc import Callable
from datetime import UTC
from typing import Any

from sqlalchemy.engine import make_url

from app.db.models import Audit
from app.db.polling import MARK_FIELDS
from app.db.retry import short_reason

log = logging.getLogger(__name__)

_COLUMNS = ("id", "heartbeat_at", *MARK_FIELDS)
# One statement, prepared on each connection: the id, the heartbeat and the mark of each audit asked for.
_MARKS = f"SELECT {', '.join(_COLUMNS)} FROM {Audit.__tablename__} WHERE id = ANY(%s)"
_Row = namedtuple("_Row", _COLUMNS)  # type: ignore[misc]
# And the whole row of one audit of one tenant (`MarkCheck.audit`), every column the model maps.
_ALL = tuple(column.key for column in Audit.__table__.columns)
_AUDIT = f"SELECT {', '.join(_ALL)} FROM {Audit.__tablename__} WHERE id = %s AND tenant_id = %s"
_AuditRow = namedtuple("_AuditRow", _ALL)  # type: ignore[misc]
BATCH_MAX = 500


def _row(values: tuple[Any, ...], columns: tuple[str, ...] = _COLUMNS, make: Any = _Row) -> Any:
    """A row as app.api.watch.etag_of reads it, its times in UTC as app.db.models.UTCDateTime gives them
    (psycopg gives JSON columns as Python values, as SQLAlchemy's JSON type does)."""
    return make(
        *(
            v.astimezone(UTC) if name.endswith("_at") and v is not None else v
            for name, v in zip(columns, values, strict=True)
        )
    )


class MarkCheck:
    """Batched mark reads for one event loop (one API process). `version(audit_id)` → the audit's current
    version, `<ETag>|<heartbeat>` (the ETag is the mark's; the heartbeat also changes the representation,
    through `updated_at`), or None when it is gone or the read failed (the caller then reads the long
    way)."""

    def __init__(self, url: str, etag_of: Callable[[Any], str], *, connections: int = 2) -> None:
        self._conninfo = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
        self._idle: list[Any] = []  # psycopg.AsyncConnection, autocommit: each read sees every commit so far
        self._etag_of = etag_of
        self._pending: dict[str, list[asyncio.Future[str | None]]] = {}
        self._slots = asyncio.Semaphore(connections)
        self._sender: asyncio.Task[None] | None = None
        self._reading: set[asyncio.Task[None]] = set()
        self.batches = 0  # how many queries so far
        self.checks = 0  # how many polls asked

    async def version(self, audit_id: str) -> str | None:
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending.setdefault(audit_id, []).append(future)
        self.checks += 1
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send())
        return await future

    def version_of(self, row: Any) -> str:
        """`<ETag>|<heartbeat>` of a row read here."""
        beat = row.heartbeat_at.isoformat() if row.heartbeat_at else ""
        return f"{self._etag_of(row)}|{beat}"

    async def audit(self, tenant_id: str, audit_id: str) -> Any | None:
        """The tenant's audit, every column, read now (on a connection of the pool, a prepared statement),
        with the attributes of an `Audit`; None when it is not theirs, or when the read failed."""
        await self._slots.acquire()
        try:
            rows = await self._fetch(_AUDIT, (audit_id, tenant_id))
        except Exception as exc:
            log.warning("audit read failed (%s); reading the long way", short_reason(exc))
            return None
        return _row(rows[0], _ALL, _AuditRow) if rows else None

    async def _send(self) -> None:
        """Start a batch whenever a connection is free and requests wait; each batch holds the requests
        that arrived before it started. Returns as soon as none waits (with no await between that check
        and its end, so a request that comes later starts the next sender)."""
        while self._pending:
            await self._slots.acquire()
            if not self._pending:
                self._slots.release()
                continue
            ids = list(self._pending)[:BATCH_MAX]
            batch = {i: self._pending.pop(i) for i in ids}
            task = asyncio.create_task(self._read(batch))
            self._reading.add(task)
            task.add_done_callback(self._reading.discard)
            await asyncio.sleep(0)  # let the batch's query go out before gathering the next one

    async def _connection(self) -> Any:
        if self._idle:
            return self._idle.pop()
        import psycopg

        return await psycopg.AsyncConnection.connect(
            self._conninfo, autocommit=True, connect_timeout=5, application_name="iclaudit-api-marks"
        )

    async def _fetch(self, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        """The rows of one prepared statement on a pooled connection; the caller holds a slot, released
        here. A connection that failed is dropped (the next read opens another) and the error raised."""
        connection = None
        try:
            connection = await self._connection()
            cursor = await connection.execute(statement, params, prepare=True)
            rows = await cursor.fetchall()
            self._idle.append(connection)
            connection = None
            return rows
        finally:
            if connection is not None:
                with contextlib.suppress(Exception):
                    await connection.close()
            self._slots.release()

    async def _read(self, batch: dict[str, list[asyncio.Future[str | None]]]) -> None:
        found: dict[str, str] = {}
        try:
            for values in await self._fetch(_MARKS, (list(batch),)):
                row = _row(values)
                found[row.id] = self.version_of(row)
            self.batches += 1
        except Exception as exc:  # the database is away: these polls read the long way (with its retries)
            log.warning("mark check failed (%s); reading the long way", short_reason(exc))
        finally:
            for audit_id, futures in batch.items():
                for future in futures:
                    if not future.done():
                        future.set_result(found.get(audit_id))

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await asyncio.gather(*[t for t in (self._sender, *self._reading) if t is not None])
        while self._idle:
            with contextlib.suppress(Exception):
                await self._idle.pop().close()


def supported(url: str) -> bool:
    """Whether marks can be read on the event loop for this database (PostgreSQL through psycopg)."""
    parsed = make_url(url)
    return parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() == "psycopg"
