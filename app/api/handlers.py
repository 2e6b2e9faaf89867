"""The exception handlers: every error the API answers, rendered in the one error shape
(app/api/errors.py). Database outages are 503 with Retry-After, any other failure a 500; neither ever
shows SQL, parameters or a stack trace (the cause is logged with the request's reference, which the
answer quotes)."""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from app.api.errors import ApiError, TooManyRequests, error_response, validation_details
from app.api.limits import QUOTA_RETRY_SECONDS
from app.db.retry import is_transient, short_reason
from app.db.scoping import InvalidPageToken
from app.jobs.checks import QuotaExceeded, Rejected, TooLarge
from app.jobs.submission import Conflict
from app.schemas.errors import NO_SOLUTION, FieldViolation

log = logging.getLogger(__name__)


def reference(request: Request) -> str:
    """The caller's `X-Request-Id` (if sane) or a fresh id: quoted in the answer, logged with the cause."""
    given = request.headers.get("x-request-id", "")
    return given if re.fullmatch(r"[A-Za-z0-9._-]{1,64}", given) else uuid.uuid4().hex[:16]


def allowed_methods(request: Request) -> list[str]:
    """Every method some route takes at this path (Starlette's own Allow names only the first route's)."""
    scope = {
        "type": "http",
        "method": request.method,
        "path": request.url.path,
        "root_path": "",
        "headers": [],
    }

    def walk(routes: list[Any]) -> set[str]:
        methods: set[str] = set()
        for route in routes:
            if hasattr(route, "effective_candidates"):  # FastAPI's included router
                methods |= walk(route.effective_candidates())
            elif hasattr(route, "matches") and route.matches(scope)[0] != Match.NONE:
                methods |= set(getattr(route, "methods", None) or ())
        return methods

    return sorted(walk(request.app.router.routes))


async def _database(request: Request, exc: SQLAlchemyError) -> JSONResponse:
    ref = reference(request)
    if is_transient(exc):
        log.warning("request %s %s: database unavailable (%s)", ref, request.url.path, short_reason(exc))
        message = f"The database is unavailable for a moment; retry shortly (reference {ref})."
        return error_response(503, message, **{"Retry-After": "1", "X-Request-Id": ref})
    log.error("request %s %s failed", ref, request.url.path, exc_info=exc)
    return _internal_error(ref)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    ref = reference(request)
    log.error("request %s %s failed", ref, request.url.path, exc_info=exc)
    return _internal_error(ref)


async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
    details = validation_details(list(exc.errors()))
    message = (
        details[0].message
        if len(details) == 1
        else f"{len(details)} problems: " + " ".join(f"{d.message}" for d in details)
    )
    arithmetic = all(err.get("type") == NO_SOLUTION for err in exc.errors())
    return error_response(422, message, details, "NO_SOLUTION" if arithmetic else None)


async def _rejected(_: Request, exc: Rejected) -> JSONResponse:
    details = [FieldViolation(path=exc.path, message=exc.message)]
    return error_response(422, exc.message, details, exc.reason)


async def _token(_: Request, exc: InvalidPageToken) -> JSONResponse:
    detail = FieldViolation(path="query.page_token", message=str(exc))
    return error_response(422, str(exc), [detail])


async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
    return error_response(409, str(exc))


async def _api(_: Request, exc: ApiError) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if exc.code == 401 else {}
    return error_response(exc.code, exc.message, exc.details, exc.reason, **headers, **exc.headers)


async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    message = exc.detail if isinstance(exc.detail, str) else "request failed"
    if exc.status_code == 404 and message == "Not Found":
        message = "No such endpoint."
    headers = dict(exc.headers or {})
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request))
        message = f"This path does not take {request.method}; it allows {headers['Allow']}."
    return error_response(exc.status_code, message, **headers)


async def _too_many(_: Request, exc: TooManyRequests) -> JSONResponse:
    return error_response(429, exc.message, **{"Retry-After": str(exc.retry_after)})


async def _too_large(_: Request, exc: TooLarge) -> JSONResponse:
    return error_response(413, exc.message, [FieldViolation(path=exc.path, message=exc.message)])


async def _quota(_: Request, exc: QuotaExceeded) -> JSONResponse:
    return error_response(429, str(exc), **{"Retry-After": str(QUOTA_RETRY_SECONDS)})


EXCEPTION_HANDLERS: dict[Any, Any] = {
    SQLAlchemyError: _database,
    Exception: _unexpected,
    RequestValidationError: _validation,
    Rejected: _rejected,
    InvalidPageToken: _token,
    Conflict: _conflict,
    ApiError: _api,
    StarletteHTTPException: _http,
    TooManyRequests: _too_many,
    TooLarge: _too_large,
    QuotaExceeded: _quota,
}
"""Every error the API answers → its handler: `FastAPI(exception_handlers=EXCEPTION_HANDLERS)`."""


def install_error_handlers(app: FastAPI) -> None:
    """EXCEPTION_HANDLERS on an app built without create_app (a router served alone)."""
    for exc, handler in EXCEPTION_HANDLERS.items():
        app.add_exception_handler(exc, handler)


def _internal_error(ref: str) -> JSONResponse:
    message = f"Internal error (reference {ref}); the operator's log has the details."
    return error_response(500, message, **{"Connection": "close", "X-Request-Id": ref})
