"""The poll of a finished or running audit, answered before the middleware stack and the router (pure
ASGI, issue 23).

A finished audit's answer never changes (app.api.watch.FinishedBodies), and a key verified in the last
few seconds needs no database (app.db.keys.remembered_tenant_id), so `GET /v1/audits/{id}` for such an
audit and key is a dictionary look-up. Through the whole stack (request ids, metrics' route matching,
security headers, the body limit, the gate, strict JSON, FastAPI's dependency solving) it cost about ten
times the look-up. `FastPoll` stands outermost and answers exactly that case with what the stack would have
answered: the body or a 304, `ETag`, `Cache-Control`, the security headers, `X-Request-ID` (set for the
log lines too), the tenant's rate limits counted (429 in the error shape), and the HTTP metrics recorded
under the route's template. Anything else — a query string, another path, a key not remembered, an
audit not rendered here, limits counted in Redis — goes down the stack unchanged.

A running audit's answer is kept too (`RunningBodies`), on the inline executor only, stamped with what it
depends on (app.jobs.writes, `InlineExecutor.write_stamp`): the writes of this process, those of the worker
process running the audit (counted in shared memory before each write can be seen) and the hand-overs of
audits to the processes. A write to one audit ends only its own answer (and this process's writes, which
do not say which audit, end all). A poll that finds it stale is answered outermost by a read of the audit
begun after the poll arrived (one read at a time per audit, shared by the polls that arrived before it
began), so it holds every write committed before the poll. An entry also ends after RUNNING_TTL_SECONDS (1 s,
the bound long-polls already have for writes from other processes, such as another API process's cancel).
With one API process a running audit's poll is as fresh as a read of the database; with Celery every such
poll reads it.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import Any

import anyio
from anyio import to_thread
from cachetools import LRUCache
from prometheus_fastapi_instrumentator import metrics
from prometheus_fastapi_instrumentator.middleware import PrometheusInstrumentatorMiddleware
from sqlalchemy.orm import Session
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.deps import count_remembered_at, remembered_tenant_id_at
from app.api.errors import ApiError, error_response
from app.api.headers import HEADERS, csp_for
from app.api.limits import TooManyRequests
from app.api.watch import CACHE_CONTROL, bodies_of, etag_of, matches
from app.db import audits as audit_rows
from app.db.models import TERMINAL_STATES
from app.observability import request_id, request_id_for
from app.schemas.audits import AuditResource

log = logging.getLogger(__name__)

RUNNING_TTL_SECONDS = 1.0
RUNNING_CACHE_ENTRIES = 4096
REFRESHES = 3  # reads in flight a poll of a stale running audit waits for before it goes down the stack

PREFIX = "/v1/audits/"
TEMPLATE = "/v1/audits/{audit_id}"
_SECURITY = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]


class RunningBodies:
    """Running audits' ETag, state and JSON by (tenant id, audit id), each with the executor's write stamp
    for that audit read before the read that rendered it (app.jobs.writes): valid while the stamp stands
    (no write to the audit, from this process or the worker process running it, has begun since) and for
    RUNNING_TTL_SECONDS (writes from other processes). A stale entry is read again once for the polls
    that find it so (`refresh`), on the event loop's side of the stack."""

    def __init__(self, executor: Any, max_entries: int = RUNNING_CACHE_ENTRIES) -> None:
        self._executor = executor
        self._cache: LRUCache[tuple[str, str], tuple[str, str, bytes, tuple[Any, ...] | None, float]] = (
            LRUCache(max_entries)
        )
        self._lock = threading.Lock()
        # (tenant id, audit id) → (when the read began, its answer): the read in flight, if any
        self._flights: dict[tuple[str, str], tuple[float, asyncio.Future[tuple[str, str, bytes] | None]]] = {}

    def stamp(self, audit_id: str) -> tuple[Any, ...] | None:
        """The audit's write stamp, read before the database read whose answer `put` keeps (None: a write
        is in flight; not kept)."""
        return self._executor.write_stamp(audit_id)

    def get(self, tenant_id: str, audit_id: str) -> tuple[str, str, bytes] | None:
        with self._lock:
            held = self._cache.get((tenant_id, audit_id))
        if held is None:
            return None
        etag, state, body, stamp, at = held
        if stamp is None or time.monotonic() - at > RUNNING_TTL_SECONDS:
            return None
        if self._executor.write_stamp(audit_id) != stamp:
            return None
        return etag, state, body

    def known(self, tenant_id: str, audit_id: str) -> bool:
        """Rendered here before for this tenant (so the audit is theirs), however old."""
        with self._lock:
            return (tenant_id, audit_id) in self._cache

    def put(
        self, tenant_id: str, audit_id: str, etag: str, state: str, body: bytes, stamp: tuple[Any, ...] | None
    ) -> None:
        with self._lock:  # stamp None (a write was in flight): known to be the tenant's, never served
            self._cache[(tenant_id, audit_id)] = (etag, state, body, stamp, time.monotonic())

    async def refresh(
        self, app: Any, tenant_id: str, audit_id: str, arrived: float
    ) -> tuple[str, str, bytes] | None:
        """The audit read again for a poll that arrived at `arrived` (perf_counter) and found its entry
        stale: one read at a time per audit, in a worker thread under a request slot, shared by the polls
        that arrived before it began (a read begun after a poll arrived answers it with every write
        committed before). None: not theirs, no slot within ICLAUDIT_API_QUEUE_SECONDS, or the read failed
        (the caller goes down the stack)."""
        key = (tenant_id, audit_id)
        for _ in range(REFRESHES):
            flight = self._flights.get(key)
            if flight is None:
                return await self._read(app, key)
            started, future = flight
            answer = await asyncio.shield(future)
            if started >= arrived:
                return answer
            if (held := self.get(tenant_id, audit_id)) is not None:  # an earlier read still current
                return held
        return None

    async def _read(self, app: Any, key: tuple[str, str]) -> tuple[str, str, bytes] | None:
        future: asyncio.Future[tuple[str, str, bytes] | None] = asyncio.get_running_loop().create_future()
        self._flights[key] = (time.perf_counter(), future)
        answer = None
        try:
            with anyio.move_on_after(app.state.settings.api_queue_seconds):
                async with app.state.db_slots:
                    sessions, bodies = app.state.session_factory, bodies_of(app)
                    answer = await to_thread.run_sync(_reread, sessions, *key, bodies, self)
        except Exception:  # the stack's read will say what went wrong
            log.debug("re-reading audit %s for its kept answer failed", key[1], exc_info=True)
        finally:
            del self._flights[key]
            future.set_result(answer)
        return answer


def _reread(
    sessions: Any, tenant_id: str, audit_id: str, bodies: Any, running: RunningBodies
) -> tuple[str, str, bytes] | None:
    session = sessions()
    try:
        return render(session, tenant_id, audit_id, bodies, running)
    finally:
        session.close()


def render(
    session: Session, tenant_id: str, audit_id: str, bodies: Any, running: RunningBodies | None
) -> tuple[str, str, bytes] | None:
    """(ETag, state, JSON) of the tenant's audit read now (None: not theirs), kept in `bodies` when finished
    and in `running` otherwise (with the write stamp taken before the read)."""
    stamp = running.stamp(audit_id) if running is not None else None
    audit = audit_rows.get_audit(session, tenant_id=tenant_id, audit_id=audit_id)
    if audit is None:
        return None
    etag = etag_of(audit)
    body = AuditResource.of(audit).model_dump_json().encode()
    if audit.state in TERMINAL_STATES:
        bodies.put(tenant_id, audit_id, etag, audit.state, body)
    elif running is not None:
        running.put(tenant_id, audit_id, etag, audit.state, body, stamp)
    return etag, audit.state, body


def running_of(app: Any) -> RunningBodies | None:
    """The app's RunningBodies on the inline executor (made on first use, on the event loop), else None."""
    state = app.state
    running = getattr(state, "running_bodies", None)
    if running is None:
        executor = getattr(state, "executor", None)
        if not hasattr(executor, "write_stamp"):
            return None
        running = state.running_bodies = RunningBodies(executor)
    return running


class FastPoll:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._metrics: PrometheusInstrumentatorMiddleware | bool | None = False  # False: not looked up

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET" and not scope["query_string"]:
            path: str = scope["path"]
            audit_id = path[len(PREFIX) :] if path.startswith(PREFIX) else ""
            if audit_id and "/" not in audit_id and await self._answer(scope, audit_id, send):
                return
        await self.app(scope, receive, send)

    async def _answer(self, scope: Scope, audit_id: str, send: Send) -> bool:
        """Answer a remembered caller's poll of a finished audit rendered before; False to go the long way."""
        started = time.perf_counter()
        state = scope["app"].state
        authorization = if_none_match = given_id = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
            elif name == b"if-none-match":
                if_none_match = value.decode("latin-1")
            elif name == b"x-request-id":
                given_id = value.decode("latin-1")
        tenant_id = remembered_tenant_id_at(state, authorization)
        if tenant_id is None:
            return False
        app = scope["app"]
        held = bodies_of(app).get(tenant_id, audit_id)
        if held is None and (running := running_of(app)) is not None:
            held = running.get(tenant_id, audit_id)
            if held is None and running.known(tenant_id, audit_id):
                held = await running.refresh(app, tenant_id, audit_id, started)
        if held is None:
            return False
        rid = request_id_for(given_id)
        request_id.set(rid)  # the access line and any other log line of this request carry it
        common = [*_SECURITY, (b"content-security-policy", csp_for(scope["path"]).encode())]
        common.append((b"x-request-id", rid.encode()))
        client = scope.get("client")
        try:
            count_remembered_at(state, authorization, client[0] if client else "unknown", "GET", tenant_id)
        except (TooManyRequests, ApiError) as exc:
            retry = {"Retry-After": str(exc.retry_after)} if isinstance(exc, TooManyRequests) else {}
            status = 429 if isinstance(exc, TooManyRequests) else exc.code
            refused = error_response(status, exc.message, **retry)
            await self._send(send, status, [*refused.raw_headers, *common], refused.body)
            self._record(scope, status, refused.raw_headers, started)
            return True
        etag, _, body = held
        headers = [(b"etag", etag.encode()), (b"cache-control", CACHE_CONTROL.encode()), *common]
        if matches(if_none_match, etag):
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

    @staticmethod
    async def _send(send: Send, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def _record(self, scope: Scope, status: int, headers: list[tuple[bytes, bytes]], started: float) -> None:
        """The HTTP metrics the instrumentator would have recorded for this answer (its own instruments)."""
        if self._metrics is False:
            self._metrics = _instrumentator(scope["app"])
        found = self._metrics
        if not isinstance(found, PrometheusInstrumentatorMiddleware):
            return
        duration = max(time.perf_counter() - started, 0.0)
        response = Response(status_code=status)
        response.raw_headers = headers
        info = metrics.Info(
            request=Request(scope),
            response=response,
            method="GET",
            modified_handler=TEMPLATE,
            modified_status=str(status),
            modified_duration=duration,
            modified_duration_without_streaming=duration,
        )
        for instrumentation in found.instrumentations:
            instrumentation(info)


def _instrumentator(app: Any) -> PrometheusInstrumentatorMiddleware | None:
    """The app's prometheus-fastapi-instrumentator middleware, found down its built middleware stack."""
    node = getattr(app, "middleware_stack", None)
    while node is not None:
        if isinstance(node, PrometheusInstrumentatorMiddleware):
            return node
        node = getattr(node, "app", None)
    return None


def install_fast_poll(app: Any) -> None:
    """Outermost (call after every other add_middleware)."""
    app.add_middleware(FastPoll)
