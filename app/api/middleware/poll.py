"""The poll of an audit answered outermost from the app's kept answers (app/api/poll.py): what the stack
would have answered (the body or a 304, `ETag`, `Cache-Control`, the security headers, `X-Request-ID`,
the tenant's limits counted, 429 in the error shape, the HTTP metrics under the route's template), for a
caller whose key was verified here in the last few seconds. Anything else goes down the stack unchanged."""

from __future__ import annotations

import time
from typing import Any

from prometheus_fastapi_instrumentator import metrics
from prometheus_fastapi_instrumentator.middleware import PrometheusInstrumentatorMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.auth import Credentials, authenticator_of
from app.api.errors import ApiError, TooManyRequests, error_response
from app.api.headers import HEADERS, csp_for
from app.api.poll import poll_cache_of
from app.api.watch import CACHE_CONTROL, matches
from app.observability import request_id, request_id_for

PREFIX = "/v1/audits/"
TEMPLATE = "/v1/audits/{audit_id}"
_SECURITY = [(k.lower().encode(), v.encode()) for k, v in HEADERS.items()]


class PollShortcut:
    """Outermost: answers a remembered caller's poll of an audit with a fresh kept answer (see the module
    docstring); anything else goes down the stack."""

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
        """Whether this poll was answered here (else it goes the long way)."""
        started = time.perf_counter()
        app = scope["app"]
        if_none_match = given_id = None
        for name, value in scope["headers"]:
            if name == b"if-none-match":
                if_none_match = value.decode("latin-1")
            elif name == b"x-request-id":
                given_id = value.decode("latin-1")
        auth, credentials = authenticator_of(app), Credentials.of_scope(scope)
        tenant_id = auth.remembered(credentials, on_loop=True)
        if tenant_id is None:
            return False
        held = await poll_cache_of(app).lookup(app, tenant_id, audit_id, started)
        if held is None:
            return False
        rid = request_id_for(given_id)
        request_id.set(rid)  # the access line and any other log line of this request carry it
        common = [*_SECURITY, (b"content-security-policy", csp_for(scope["path"]).encode())]
        common.append((b"x-request-id", rid.encode()))
        try:
            await auth.count_async(credentials, tenant_id)
        except (TooManyRequests, ApiError) as exc:
            retry = {"Retry-After": str(exc.retry_after)} if isinstance(exc, TooManyRequests) else {}
            status = 429 if isinstance(exc, TooManyRequests) else exc.code
            refused = error_response(status, exc.message, **retry)
            await self._send(send, status, [*refused.raw_headers, *common], bytes(refused.body))
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
