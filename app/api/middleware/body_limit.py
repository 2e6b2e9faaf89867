"""The body limit (pure ASGI, outside the routes): a `Content-Length` over the limit is answered 413
before a byte of the body is read, so before parsing and before authentication; a body without one is
counted as it streams, and the read that crosses the limit raises `RequestTooLarge` (an HTTPException,
which FastAPI re-raises and the error handler renders). A body that stops arriving for
ICLAUDIT_BODY_TIMEOUT_SECONDS is answered 408. Per route (`body_limit_for`)."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import RequestTimeout, RequestTooLarge, error_response
from app.config import Settings

MULTIPART_ROOM = 2**20  # boundaries and part headers around an upload of ICLAUDIT_UPLOAD_MAX_BYTES


class BodyLimit:
    """413 for a request body over `limit_for(scope)` = (bytes, setting name); see the module docstring."""

    def __init__(
        self, app: ASGIApp, limit_for: Callable[[Scope], tuple[int, str]], body_timeout: float = 30.0
    ) -> None:
        self.app = app
        self.limit_for = limit_for
        self.body_timeout = body_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, setting = self.limit_for(scope)
        declared = Headers(scope=scope).get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            response = error_response(413, RequestTooLarge(limit, setting).detail, Connection="close")
            await response(scope, receive, send)
            return
        received = 0
        whole = False  # the body has been read to its end (or the client left): no more timeouts

        async def counted() -> Message:
            nonlocal received, whole
            if whole:  # e.g. a streaming answer waiting for the disconnect
                return await receive()
            try:
                with anyio.fail_after(self.body_timeout):
                    message = await receive()
            except TimeoutError:
                raise RequestTimeout(self.body_timeout) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise RequestTooLarge(limit, setting)
                whole = not message.get("more_body", False)
            else:
                whole = True
            return message

        started = False

        async def tracked(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted, tracked)
        except (RequestTooLarge, RequestTimeout) as exc:  # outside the routes (a middleware reading the body)
            if started:
                raise
            await error_response(exc.status_code, exc.detail, Connection="close")(scope, receive, send)


def body_limit_for(settings: Settings) -> Callable[[Scope], tuple[int, str]]:
    """(bytes, setting) of a request's body limit, per route: a dataset upload ICLAUDIT_UPLOAD_MAX_BYTES (+
    multipart room), an audit ICLAUDIT_MAX_REQUEST_BYTES, everything else (sweeps, schedules, webhooks,
    calculators, a body where none is read) ICLAUDIT_MAX_SMALL_REQUEST_BYTES."""

    def limit_for(scope: Scope) -> tuple[int, str]:
        path = scope["path"].rstrip("/")
        if scope["method"] == "POST" and path == "/v1/datasets":
            return settings.upload_max_bytes + MULTIPART_ROOM, "ICLAUDIT_UPLOAD_MAX_BYTES"
        if scope["method"] == "POST" and path == "/v1/audits":
            return settings.max_request_bytes, "ICLAUDIT_MAX_REQUEST_BYTES"
        return settings.max_small_request_bytes, "ICLAUDIT_MAX_SMALL_REQUEST_BYTES"

    return limit_for
