"""The middleware stack, declared once, outer to inner (`stack`), and passed to `FastAPI(middleware=...)`.

Starlette wraps it in ServerErrorMiddleware (outermost, the last-resort 500) and ExceptionMiddleware
(innermost, the exception handlers of app/api/handlers.py). Every layer here is pure ASGI.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry
from starlette.middleware import Middleware

from app.api.metrics import http_metrics
from app.api.middleware.auth_first import AuthenticateFirst
from app.api.middleware.body_limit import BodyLimit, body_limit_for
from app.api.middleware.close import CloseOnServerError
from app.api.middleware.headers import SecurityHeaders
from app.api.middleware.poll import PollShortcut
from app.api.middleware.strict_json import StrictJSON
from app.config import Settings
from app.observability import request_ids


def stack(settings: Settings, registry: CollectorRegistry) -> list[Middleware]:
    """Outer to inner: a poll answered from a kept answer, before anything else (app/api/poll.py);
    X-Request-ID on every answer below it, limits' included; the HTTP metrics (`registry`); security
    headers; the body limit per route (413 from Content-Length before a byte is read, 408 on a stalled
    body); authentication of a caller that sends a body, before it is read; strict JSON, parsed once and
    off the event loop; `Connection: close` on every 5xx the handlers render."""
    return [
        Middleware(PollShortcut),
        request_ids(),
        http_metrics(registry),
        Middleware(SecurityHeaders),
        Middleware(BodyLimit, limit_for=body_limit_for(settings), body_timeout=settings.body_timeout_seconds),
        Middleware(AuthenticateFirst),
        Middleware(StrictJSON),
        Middleware(CloseOnServerError),
    ]
