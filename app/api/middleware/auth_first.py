"""Authenticate before a body is read (pure ASGI).

FastAPI reads and parses a route's body before it resolves the route's dependencies, authentication
included, so without this door a caller with no key could make the service buffer and parse megabytes.
`AuthenticateFirst` stands in front of the body: a POST, PUT or PATCH under /v1/ that carries a body (every
/v1 route needs a caller) is authenticated first, with the route's own check
(`app.api.auth.Authenticator.verify`: the failed-authentication throttles, then
the key), and answered 401 or
429 without a byte of its body read. A key verified in this process in the last few seconds costs nothing
(no thread, no slot); otherwise the check takes one request slot and one thread hop, as a poll does. The
route then authenticates again from memory and counts the request against the tenant's rate limits.

The answer to a refused caller closes the connection (`Connection: close`): the unread body is not drained.
"""

from __future__ import annotations

from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.auth import Credentials, authenticator_of
from app.api.errors import ApiError, TooManyRequests, error_response
from app.api.middleware.strict_json import is_v1_write
from app.api.sessions import run_in_session
from app.api.state import state_of


def _has_body(scope: Scope) -> bool:
    headers = Headers(scope=scope)
    length = headers.get("content-length")
    if length is not None:
        return length.strip() != "0"
    return "transfer-encoding" in headers


class AuthenticateFirst:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (is_v1_write(scope) and _has_body(scope)):
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        if not state_of(request.app).settings.auth_enabled:
            await self.app(scope, receive, send)
            return
        auth = authenticator_of(request.app)
        credentials = Credentials.of(request, request.headers.get("authorization"))
        if auth.remembered(credentials) is None:
            try:
                await run_in_session(request, auth.verify, credentials)
            except ApiError as exc:
                extra = {"WWW-Authenticate": "Bearer"} if exc.code == 401 else {}
                response = error_response(
                    exc.code, exc.message, exc.details, **extra, **exc.headers, Connection="close"
                )
                await response(scope, receive, send)
                return
            except TooManyRequests as exc:
                response = error_response(
                    429, exc.message, **{"Retry-After": str(exc.retry_after)}, Connection="close"
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
