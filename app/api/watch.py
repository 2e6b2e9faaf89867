"""Cheap polling: strong ETags, `If-None-Match`, the `wait` parameter, and `AuditWatch`, the hub that wakes
long-polls (`GET /v1/audits/{id}?wait=30s`) and event streams (`GET /v1/audits/{id}/events`).

An audit's ETag is a hash of its *mark* (app.db.polling.MARK_FIELDS: state, progress, attempt, cancel
flag, start and finish times), read in one narrow query, so a poller holding the current ETag gets 304
without the row's request or result being loaded or rendered.

AuditWatch keeps, per watched audit, the ETags its waiters hold. When woken it re-reads the marks of every
watched audit in one query and resolves the waiters whose ETag changed. It is woken by every commit of
any session in this process (the inline executor's progress and state writes: a SQLAlchemy
`after_commit` listener on `Session`) and, for writes from other processes (Celery workers), every `interval` seconds while anyone
waits. Waiting holds neither a thread nor a database connection: a waiter is an asyncio future.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Sequence
from typing import Annotated, Any

from anyio import to_thread
from fastapi import Depends, Query
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette

from app.api.errors import ApiError
from app.api.state import state_of
from app.db import polling
from app.schemas.errors import FieldViolation

log = logging.getLogger(__name__)

MAX_WAIT_SECONDS = 60.0
# `30s` or `30`, at most MAX_WAIT_SECONDS (60) with up to 3 decimals: the schema states the whole rule.
WAIT_PATTERN = r"^(60(\.0{1,3})?|[0-5]?[0-9](\.[0-9]{1,3})?)s?$"
CACHE_CONTROL = "private, no-cache"


def etag_of(row: Any) -> str:
    """A strong ETag from an audit's mark (a row of app.db.polling or an `Audit`): 32 hex digits, quoted."""
    parts = [getattr(row, name) for name in polling.MARK_FIELDS]
    raw = "|".join(p.isoformat() if hasattr(p, "isoformat") else repr(p) for p in parts)
    return f'"{hashlib.blake2b(raw.encode(), digest_size=16).hexdigest()}"'


def matches(if_none_match: str | None, etag: str) -> bool:
    """RFC 9110 §13.1.2: `*`, or any listed tag equal to `etag` by weak comparison (`W/` ignored)."""
    if not if_none_match:
        return False
    return any(tag.strip() in ("*", etag, f"W/{etag}") for tag in if_none_match.split(","))


async def wait_seconds(  # async: a sync dependency costs every poll a thread hop
    wait: Annotated[
        str | None,
        Query(
            pattern=WAIT_PATTERN,
            description=f"Long-poll: answer as soon as the audit differs from `If-None-Match` (or, without "
            f"it, from the audit when the request arrived), at most this long: `30s` or `30`, up to "
            f"{MAX_WAIT_SECONDS:.0f} s. On time-out: 304 with `If-None-Match`, else 200 with the unchanged "
            "audit. A finished audit answers at once.",
            examples=["30s"],
        ),
    ] = None,
) -> float:
    if wait is None:
        return 0.0
    seconds = float(wait.removesuffix("s"))
    if seconds > MAX_WAIT_SECONDS:
        message = f"wait is {wait}, above the longest long-poll of {MAX_WAIT_SECONDS:.0f} s."
        raise ApiError(422, message, [FieldViolation(path="query.wait", message=message)])
    return seconds


WaitDep = Annotated[float, Depends(wait_seconds)]


class AuditWatch:
    """The long-poll hub of one app (one event loop). `start()` inside the loop, `stop()` at shutdown."""

    def __init__(
        self, session_factory: sessionmaker[Session], *, interval: float = 1.0, min_gap: float = 0.05
    ) -> None:
        self._sessions = session_factory
        self._interval = interval
        self._min_gap = min_gap
        self._waiters: dict[str, list[tuple[str, asyncio.Future[str | None]]]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._woken = asyncio.Event()
        self._watching = asyncio.Event()
        self.wakes = 0  # how many wakes so far (read before a request's own read; see `changed`)

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        event.listen(Session, "after_commit", self._after_commit)
        self._task = asyncio.create_task(self._run(), name="audit-watch")

    async def stop(self) -> None:
        event.remove(Session, "after_commit", self._after_commit)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for waiters in self._waiters.values():
            for _, future in waiters:
                future.cancel()
        self._waiters.clear()

    def _after_commit(self, _session: Session) -> None:
        self.wake_threadsafe()

    def wake_threadsafe(self) -> None:
        """From any thread: re-check the watched audits soon (a write may have changed one)."""
        if self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
                self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self.wakes += 1
        self._woken.set()

    async def changed(self, audit_id: str, etag: str, timeout: float | None, since: int) -> bool:
        """Wait until the audit's ETag differs from `etag` (True) or `timeout` seconds pass (False).
        `since` is `self.wakes` read before the caller read `etag`: a write that landed in between wakes
        the hub again at once, so no change is missed."""
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(audit_id, [])
        waiters.append((etag, future))
        self._watching.set()
        if self.wakes != since:
            self._wake()
        try:
            await asyncio.wait_for(future, timeout)
            return True
        except TimeoutError:
            return False
        finally:
            waiters.remove((etag, future))
            if not waiters:
                self._waiters.pop(audit_id, None)
            if not self._waiters:
                self._watching.clear()

    def _read(self, audit_ids: Sequence[str]) -> dict[str, str]:
        with self._sessions() as session:
            return {i: etag_of(row) for i, row in polling.marks(session, audit_ids).items()}

    async def _run(self) -> None:
        while True:
            await self._watching.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), self._interval)
            self._woken.clear()
            ids = list(self._waiters)
            if not ids:
                continue
            try:
                etags = await to_thread.run_sync(self._read, ids)
            except Exception:
                log.exception("audit watch: re-reading %d audit(s) failed; retrying", len(ids))
                await asyncio.sleep(self._interval)
                continue
            for audit_id in ids:
                current = etags.get(audit_id)
                for held, future in self._waiters.get(audit_id, []):
                    if held != current and not future.done():
                        future.set_result(current)
            await asyncio.sleep(self._min_gap)


def watch_of(app: Starlette) -> AuditWatch:
    return state_of(app).audit_watch
