"""The poll of an audit (`GET /v1/audits/{id}`) answered from memory, before the middleware stack.

One cache (`AnswerCache`) keeps the rendered answers of audits by (tenant id, audit id). A finished
audit's answer never changes (every write of a state is conditioned on PENDING or RUNNING), so it is
served as kept. A running audit's answer is served only while it is proven fresh, by one of two
strategies, chosen by where the writes and the limits live:

- `WriteStamp` (one API process, limits in its memory, the inline executor): the executor's write stamp
  for the audit (app.jobs.writes), read before the read that rendered the answer, still stands and the
  answer is younger than RUNNING_TTL_SECONDS (the bound long-polls have for writes of other processes);
- `PgVersion` (limits in Redis, several API processes or Celery workers, PostgreSQL): the audit's current
  version (mark and heartbeat, app.db.mark_check, read after the poll arrived) equals the version the
  answer was rendered at.

A stale answer is read again once for all the polls that find it so (`SingleFlight`): a poll takes that
read's answer when the strategy accepts it (a read begun after the poll arrived; the version the poll's
own check read), else it goes the long way. The route keeps what it renders here; the outermost
middleware (app.api.middleware.poll) answers from here before the stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
from anyio import to_thread
from cachetools import LRUCache
from sqlalchemy.orm import Session

from app.api.state import state_of
from app.api.watch import etag_of
from app.db import audits as audit_rows
from app.db import mark_check
from app.db.models import TERMINAL_STATES
from app.schemas.audits import AuditResource

log = logging.getLogger(__name__)

CACHE_BYTES = 32 * 2**20
RUNNING_TTL_SECONDS = 1.0
RUNNING_MAX_BODY = 256 * 1024  # a running answer read on the event loop (PgVersion) above this: not kept
REFRESHES = 3  # reads in flight a poll of a stale running audit waits for before it goes down the stack


Answer = tuple[str, str, bytes]  # (ETag, state, JSON body)
FINAL = "final"  # the proof of a finished audit's answer: always fresh
SKIP = object()  # `Freshness.before_read`: do not keep this read's answer
UNKNOWN = object()  # `Freshness.current`: freshness cannot be told here; the long way answers


@dataclass(frozen=True, slots=True)
class Kept:
    etag: str
    state: str
    body: bytes
    proof: Any  # FINAL, or what the strategy checks (None: known to be the tenant's, never served)
    at: float  # time.monotonic() when kept

    @property
    def answer(self) -> Answer:
        return self.etag, self.state, self.body


class AnswerCache:
    """Rendered answers by (tenant id, audit id), LRU-bounded by bytes (thread-safe). Keyed by tenant: an
    entry is made only from a tenant-scoped read, so a body never crosses tenants."""

    def __init__(self, max_bytes: int = CACHE_BYTES) -> None:
        self._cache: LRUCache[tuple[str, str], Kept] = LRUCache(
            max_bytes, getsizeof=lambda k: len(k.body) + 1
        )
        self._lock = threading.Lock()

    def get(self, tenant_id: str, audit_id: str) -> Kept | None:
        with self._lock:
            return self._cache.get((tenant_id, audit_id))

    def finished(self, tenant_id: str, audit_id: str) -> Answer | None:
        """A finished audit's answer, if rendered before (its state is final)."""
        kept = self.get(tenant_id, audit_id)
        return kept.answer if kept is not None and kept.proof is FINAL else None

    def keep(self, tenant_id: str, audit_id: str, kept: Kept) -> None:
        if len(kept.body) < self._cache.maxsize:
            with self._lock:
                self._cache[(tenant_id, audit_id)] = kept

    def forget(self, tenant_id: str, audit_ids: list[str]) -> None:
        """Drop answers whose stored result was rewritten (a dataset's purge, in the process that purges)."""
        with self._lock:
            for audit_id in audit_ids:
                self._cache.pop((tenant_id, audit_id), None)


class Freshness(Protocol):
    """How a running audit's kept answer is proven fresh."""

    attempts: int  # reads in flight a poll of a stale answer waits for before it goes the long way
    needs_known: bool  # read again only an answer rendered here before for this tenant

    def before_read(self, audit_id: str) -> Any:
        """The proof to keep a read begun now under (SKIP: not kept)."""

    async def current(self, audit_id: str) -> Any:
        """The proof a kept answer must hold now (UNKNOWN: the long way answers)."""

    def holds(self, kept: Kept, current: Any) -> bool: ...

    def accepts(self, kept: Kept | None, current: Any, started: float, arrived: float) -> bool:
        """Whether a poll that arrived at `arrived` (and read `current`) takes a read begun at `started`."""

    async def read(self, poll: PollCache, app: Any, tenant_id: str, audit_id: str) -> Kept | None:
        """The tenant's audit read again and kept (None: not theirs, or unreadable here)."""

    async def close(self) -> None: ...


class WriteStamp:
    """Fresh while the executor's write stamp for the audit (app.jobs.writes), read before the read that
    rendered the answer, stands (no write to it by this process, or by the worker process running it, has
    begun since) and for RUNNING_TTL_SECONDS (writes of other processes). A stale answer is read again in
    a worker thread under a request slot; a poll takes a read begun after it arrived, so it holds every
    write committed before."""

    attempts = REFRESHES
    needs_known = True

    def __init__(self, executor: Any) -> None:
        self._executor = executor

    def before_read(self, audit_id: str) -> Any:
        return self._executor.write_stamp(audit_id)  # None: a write in flight (known, never served)

    async def current(self, audit_id: str) -> Any:
        return self._executor.write_stamp(audit_id)

    def holds(self, kept: Kept, current: Any) -> bool:
        young = time.monotonic() - kept.at <= RUNNING_TTL_SECONDS
        return kept.proof is not None and young and kept.proof == current

    def accepts(self, kept: Kept | None, current: Any, started: float, arrived: float) -> bool:
        return started >= arrived

    async def read(self, poll: PollCache, app: Any, tenant_id: str, audit_id: str) -> Kept | None:
        state = state_of(app)
        with anyio.move_on_after(state.settings.api_queue_seconds):
            async with state.db_slots:
                return await to_thread.run_sync(_reread, state.session_factory, poll, tenant_id, audit_id)
        return None

    async def close(self) -> None:
        return None


def _reread(sessions: Any, poll: PollCache, tenant_id: str, audit_id: str) -> Kept | None:
    session = sessions()
    try:
        return poll.read(session, tenant_id, audit_id)
    finally:
        session.close()


class PgVersion:
    """Fresh while the audit's version in PostgreSQL (mark and heartbeat, app.db.mark_check: read after
    the poll arrived, batched on the event loop) equals the version the answer was rendered at: a write
    by any process committed before the poll began changes it. A stale answer is read again on the event
    loop (`MarkCheck.audit`, rendered as the route renders it); a poll takes it when its version is the
    one the poll's own check read. A finished audit, or one not the tenant's, goes the long way."""

    attempts = 1
    needs_known = False

    def __init__(self, checks: mark_check.MarkCheck) -> None:
        self._checks = checks

    def before_read(self, audit_id: str) -> Any:
        return SKIP  # the route's reads carry no version; this strategy's own reads keep theirs

    async def current(self, audit_id: str) -> Any:
        version = await self._checks.version(audit_id)  # None: not found, or the database is away
        return UNKNOWN if version is None else version

    def holds(self, kept: Kept, current: Any) -> bool:
        return bool(kept.proof == current)

    def accepts(self, kept: Kept | None, current: Any, started: float, arrived: float) -> bool:
        return kept is not None and kept.proof == current

    async def read(self, poll: PollCache, app: Any, tenant_id: str, audit_id: str) -> Kept | None:
        row = await self._checks.audit(tenant_id, audit_id)
        if row is None or row.state in TERMINAL_STATES:
            return None
        try:
            body = AuditResource.of(row).model_dump_json().encode()
        except Exception:  # a row the route would refuse to render says so itself
            log.exception("could not render audit %s here; the long way answers", audit_id)
            return None
        if len(body) > RUNNING_MAX_BODY:
            return None
        kept = Kept(etag_of(row), row.state, body, self._checks.version_of(row), time.monotonic())
        poll.answers.keep(tenant_id, audit_id, kept)
        return kept

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._checks.close()


class SingleFlight:
    """At most one read at a time per key; the callers that come while it is in flight await its answer
    (with when it began) instead of reading themselves."""

    def __init__(self) -> None:
        self._flights: dict[tuple[str, str], tuple[float, asyncio.Future[Any]]] = {}

    def in_flight(self, key: tuple[str, str]) -> tuple[float, asyncio.Future[Any]] | None:
        return self._flights.get(key)

    async def run(self, key: tuple[str, str], read: Callable[[], Awaitable[Any]]) -> Any:
        """`read()`'s answer, shared with whoever awaits this flight (None when it failed: logged)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._flights[key] = (time.perf_counter(), future)
        answer = None
        try:
            answer = await read()
        except Exception:  # the long way's read will say what went wrong
            log.debug("re-reading audit %s for its kept answer failed", key[1], exc_info=True)
        finally:
            del self._flights[key]
            future.set_result(answer)
        return answer


class PollCache:
    """The app's kept poll answers, the freshness strategy of its running ones (None: only finished
    answers are kept) and the single-flight of their re-reads."""

    def __init__(self, freshness: Freshness | None) -> None:
        self.answers = AnswerCache()
        self.freshness = freshness
        self._flights = SingleFlight()

    def read(
        self, session: Session, tenant_id: str, audit_id: str, *, keep_running: bool = True
    ) -> Kept | None:
        """The tenant's audit read now and rendered (None: not theirs), kept when finished, and, with
        `keep_running`, when running under the proof the strategy took before the read."""
        proof = SKIP
        if keep_running and self.freshness is not None:
            proof = self.freshness.before_read(audit_id)
        audit = audit_rows.get_audit(session, tenant_id=tenant_id, audit_id=audit_id)
        if audit is None:
            return None
        if audit.state in TERMINAL_STATES:
            proof = FINAL
        body = AuditResource.of(audit).model_dump_json().encode()
        kept = Kept(etag_of(audit), audit.state, body, proof, time.monotonic())
        if proof is not SKIP:
            self.answers.keep(tenant_id, audit_id, kept)
        return kept

    def render(
        self, session: Session, tenant_id: str, audit_id: str, *, keep_running: bool = True
    ) -> Answer | None:
        """(ETag, state, JSON) of the tenant's audit read now (None: not theirs); see `read`."""
        kept = self.read(session, tenant_id, audit_id, keep_running=keep_running)
        return kept.answer if kept is not None else None

    async def lookup(self, app: Any, tenant_id: str, audit_id: str, arrived: float) -> Answer | None:
        """A fresh answer for a poll that arrived at `arrived` (perf_counter), from memory or one shared
        read; None: the long way answers."""
        kept = self.answers.get(tenant_id, audit_id)
        if kept is not None and kept.proof is FINAL:
            return kept.answer
        fresh = self.freshness
        if fresh is None or (kept is None and fresh.needs_known):
            return None
        current = await fresh.current(audit_id)  # read after the poll arrived
        if current is UNKNOWN:
            return None
        if kept is not None and fresh.holds(kept, current):
            return kept.answer
        key = (tenant_id, audit_id)
        for attempt in range(fresh.attempts):
            if attempt:  # an earlier read may still be current
                current = await fresh.current(audit_id)
                kept = self.answers.get(tenant_id, audit_id)
                if kept is not None and current is not UNKNOWN and fresh.holds(kept, current):
                    return kept.answer
            flight = self._flights.in_flight(key)
            if flight is None:
                kept = await self._flights.run(key, lambda: fresh.read(self, app, tenant_id, audit_id))
                return kept.answer if kept is not None else None
            started, future = flight
            kept = await asyncio.shield(future)
            if fresh.accepts(kept, current, started, arrived):
                return kept.answer if kept is not None else None
        return None

    async def close(self) -> None:
        if self.freshness is not None:
            await self.freshness.close()


def poll_cache_of(app: Any) -> PollCache:
    """The app's PollCache (made on first use, on the event loop): running answers proven by the write
    stamp with the limits in this process's memory and an executor that stamps (inline), by the version
    in PostgreSQL with the limits shared (Redis), else only finished answers kept."""
    state = state_of(app)
    if state.poll_cache is None:
        freshness: Freshness | None = None
        executor = state.executor
        url = state.settings.sqlalchemy_url
        if state.guard.local and hasattr(executor, "write_stamp"):
            freshness = WriteStamp(executor)
        elif not state.guard.local and mark_check.supported(url):
            freshness = PgVersion(mark_check.MarkCheck(url, etag_of))
        state.poll_cache = PollCache(freshness)
    return state.poll_cache


def forget_finished(app: Any, tenant_id: str, audit_ids: list[str]) -> None:
    """Drop the kept answers of finished audits whose stored result was rewritten (a dataset's purge)."""
    poll = state_of(app).poll_cache
    if poll is not None:
        poll.answers.forget(tenant_id, audit_ids)


async def close_poll_cache(app: Any) -> None:
    poll = state_of(app).poll_cache
    if poll is not None:
        await poll.close()
