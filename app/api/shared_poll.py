"""The poll of an audit answered before the middleware stack when the rate limits are shared by several
API processes (`iclaudit serve --workers N`, limits in Redis; issue 22 §5), as app/api/fast_poll.py
answers it for one process with its limits in memory.

For a caller whose key was verified here in the last few seconds (app.db.keys.remembered; its secret
passed here, so the failed-authentication throttles check nothing):

- a finished audit's kept answer (app.api.watch.FinishedBodies) is served as is: a terminal state is final,
  whichever process wrote it;
- a running audit's answer kept here (`CheckedRunning`) is served only after its current version (the
  mark that makes its ETag, and the heartbeat behind its `updated_at`) is read from PostgreSQL
  (app.db.mark_check: one indexed SELECT per batch of polls, on the event loop, after the poll arrived)
  and equals the version the answer was rendered at. A write by any process (a Celery worker's progress
  or heartbeat, another API process's cancel) committed before the poll began changes the version; one
  poll then reads the whole row on the event loop (`MarkCheck.audit`), renders it as the route does
  (`AuditResource.of`) and keeps it at the version of what it read, and the polls that found that same
  version take its answer: never a stale state. A finished audit, or one not the tenant's, goes the long
  way (whose route keeps a finished answer).

The tenant's limit is counted in Redis on the event loop (app.api.limits.Guard.request_async: the same
window every process and the long way count in); 429 in the error shape. The answer carries what the
stack would have added (ETag, Cache-Control, the security headers, X-Request-ID) and the HTTP metrics are
recorded under the route's template. Anything else goes down the stack unchanged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from typing import Any

from cachetools import LRUCache
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import _renew_soon
from app.api.errors import error_response
from app.api.fast_poll import _SECURITY, PREFIX, FastPoll
from app.api.headers import csp_for
from app.api.limits import TooManyRequests
from app.api.watch import CACHE_CONTROL, bodies_of, etag_of, matches
from app.db import keys, mark_check
from app.db.models import TERMINAL_STATES
from app.observability import request_id, request_id_for
from app.schemas.audits import AuditResource

log = logging.getLogger(__name__)

CHECKED_ENTRIES = 4096
CHECKED_MAX_BODY = 256 * 1024


Kept = tuple[str, str, bytes]  # (version: app.db.mark_check.MarkCheck.version, ETag, body)


class CheckedRunning:
    """Running audits' answers by (tenant id, audit id), each with the version (mark and heartbeat) it
    was rendered at: served only while the audit's current version is the same (see the module
    docstring)."""

    def __init__(self, max_entries: int = CHECKED_ENTRIES) -> None:
        self._cache: LRUCache[tuple[str, str], Kept] = LRUCache(max_entries)
        self._lock = threading.Lock()
        self._refreshing: dict[tuple[str, str], asyncio.Future[Kept | None]] = {}

    def get(self, tenant_id: str, audit_id: str) -> Kept | None:
        with self._lock:
            return self._cache.get((tenant_id, audit_id))

    def put(self, tenant_id: str, audit_id: str, kept: Kept) -> None:
        with self._lock:
            self._cache[(tenant_id, audit_id)] = kept

    def refresh(self, tenant_id: str, audit_id: str) -> asyncio.Future[Kept | None] | None:
        """The refresh in flight for this answer (a poll reading it again), or None after starting
        one: the caller then reads it and calls `settle`."""
        future = self._refreshing.get((tenant_id, audit_id))
        if future is None:
            self._refreshing[(tenant_id, audit_id)] = asyncio.get_running_loop().create_future()
        return future

    def settle(self, tenant_id: str, audit_id: str) -> None:
        """The refresh is done: its waiters get what is kept now (None when nothing is)."""
        future = self._refreshing.pop((tenant_id, audit_id), None)
        if future is not None and not future.done():
            future.set_result(self.get(tenant_id, audit_id))


class SharedPoll(FastPoll):
    def __init__(self, app: ASGIApp) -> None:
        super().__init__(app)
        self._checks: mark_check.MarkCheck | bool | None = False  # False: not made yet
        self._running = CheckedRunning()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            path: str = scope["path"]
            audit_id = path[len(PREFIX) :] if path.startswith(PREFIX) else ""
            state = scope["app"].state
            if audit_id and "/" not in audit_id and not state.guard.local:
                tenant_id = self._remembered(state, scope)
                if tenant_id is not None and await self._answer_shared(scope, audit_id, tenant_id, send):
                    return
        await self.app(scope, receive, send)

    @staticmethod
    def _remembered(state: Any, scope: Scope) -> str | None:
        """The tenant of a key verified here lately that the failure throttles would pass at once."""
        if not state.settings.auth_enabled:
            return state.default_tenant_id  # type: ignore[no-any-return]
        authorization = _header(scope, b"authorization")
        scheme, _, key = (authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key or not state.guard.known_good(key):
            return None
        found = keys.remembered(key)
        if found is None:
            return None
        if found[1] > keys.VERIFIED_TTL_SECONDS / 2:
            _renew_soon(state, key)
        return found[0]

    def _mark_check(self, state: Any) -> mark_check.MarkCheck | None:
        if self._checks is False:
            url = state.settings.sqlalchemy_url
            self._checks = mark_check.MarkCheck(url, etag_of) if mark_check.supported(url) else None
            state.mark_check = self._checks  # closed at shutdown (close_shared_poll)
        return self._checks  # type: ignore[return-value]

    async def _answer_shared(self, scope: Scope, audit_id: str, tenant_id: str, send: Send) -> bool:
        """Whether this poll was answered here (else it goes the long way)."""
        started = time.perf_counter()
        state = scope["app"].state
        held = bodies_of(scope["app"]).get(tenant_id, audit_id)
        if held is not None:
            etag, _, body = held
        else:
            checks = self._mark_check(state)
            if checks is None:
                return False
            current = await checks.version(audit_id)  # read after this poll arrived
            if current is None:  # not found, or the database is away: the long way says which
                return False
            kept = self._running.get(tenant_id, audit_id)
            if kept is None or kept[0] != current:
                # written since: one poll reads it again, the others wait for that and take it when its
                # version is the one their own check read
                waiting = self._running.refresh(tenant_id, audit_id)
                if waiting is None:
                    try:
                        kept = await self._reread(checks, tenant_id, audit_id)
                    finally:
                        self._running.settle(tenant_id, audit_id)
                else:
                    kept = await asyncio.shield(waiting)
                    if kept is not None and kept[0] != current:
                        kept = None
                if kept is None:
                    return False
            _, etag, body = kept
        rid = request_id_for(_header(scope, b"x-request-id"))
        request_id.set(rid)
        common = [*_SECURITY, (b"content-security-policy", csp_for(scope["path"]).encode())]
        common.append((b"x-request-id", rid.encode()))
        try:
            await state.guard.request_async(tenant_id, "GET")
        except TooManyRequests as exc:
            refused = error_response(429, exc.message, **{"Retry-After": str(exc.retry_after)})
            await self._send(send, 429, [*refused.raw_headers, *common], refused.body)
            self._record(scope, 429, refused.raw_headers, started)
            return True
        headers = [(b"etag", etag.encode()), (b"cache-control", CACHE_CONTROL.encode()), *common]
        if matches(_header(scope, b"if-none-match"), etag):
            await self._send(send, 304, headers, b"")
            self._record(scope, 304, headers, started)
            return True
        headers = [
            (b"content-length", str(len(body)).encode()),
            (b"content-type", b"application/json"),
            *headers,
        ]
        await self._send(send, 200, headers, body)
        self._record(scope, 200, headers, started)
        return True

    async def _reread(self, checks: mark_check.MarkCheck, tenant_id: str, audit_id: str) -> Kept | None:
        """The tenant's running audit read now and rendered as the route renders it, kept at the version of
        what was read; None (the long way) when it is finished, not theirs, or unreadable here."""
        row = await checks.audit(tenant_id, audit_id)
        if row is None or row.state in TERMINAL_STATES:
            return None
        try:
            body = AuditResource.of(row).model_dump_json().encode()
        except Exception:  # a row the route would refuse to render says so itself
            log.exception("could not render audit %s here; the long way answers", audit_id)
            return None
        if len(body) > CHECKED_MAX_BODY:
            return None
        kept = (checks.version_of(row), etag_of(row), body)
        self._running.put(tenant_id, audit_id, kept)
        return kept


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key == name:
            return value.decode("latin-1")  # type: ignore[no-any-return]
    return None


def install_shared_poll(app: Any) -> None:
    """Outermost, after install_fast_poll (it passes every request through while the limits are local)."""
    app.add_middleware(SharedPoll)


async def close_shared_poll(app: Any) -> None:
    checks = getattr(app.state, "mark_check", None)
    if checks:
        with contextlib.suppress(Exception):
            await checks.close()
