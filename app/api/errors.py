"""Every error answer has one shape, `{"error": {code, status, message, details: [{path, message}]}}`:
a sentence a person understands and, for bad input, the JSON path of each offending field."""

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
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app import secrets
from app.api.limits import QUOTA_RETRY_SECONDS, TooManyRequests
from app.audit.kinds.registry import KINDS
from app.db.retry import is_transient, short_reason
from app.db.scoping import InvalidPageToken
from app.jobs.service import Conflict, QuotaExceeded, Rejected, TooLarge
from app.schemas.errors import NO_SOLUTION, REFUSALS, ErrorBody, ErrorResponse, FieldViolation

log = logging.getLogger(__name__)

_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    408: "DEADLINE_EXCEEDED",
    409: "FAILED_PRECONDITION",
    413: "PAYLOAD_TOO_LARGE",
    415: "UNSUPPORTED_MEDIA_TYPE",
    422: "INVALID_ARGUMENT",
    429: "RESOURCE_EXHAUSTED",
    500: "INTERNAL",
    503: "UNAVAILABLE",
}


class ApiError(Exception):
    def __init__(
        self,
        code: int,
        message: str,
        details: list[FieldViolation] | None = None,
        headers: dict[str, str] | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details or []
        self.headers = headers or {}
        self.reason = reason  # a key of app.schemas.errors.REFUSALS


def error_response(
    code: int,
    message: str,
    details: list[FieldViolation] | None = None,
    reason: str | None = None,
    **headers: str,
) -> JSONResponse:
    """The error answer; `reason` (REFUSALS) only for a refusal no schema can predict, else left out."""
    status = _STATUS.get(code, "UNKNOWN")
    body = ErrorResponse(
        error=ErrorBody(code=code, status=status, message=message, details=details or [], reason=reason)
    )
    # no resolved target secret in an error answer, whatever text reached it (app/secrets.py)
    content = secrets.scrub_value(body.model_dump(exclude_none=True))
    return JSONResponse(content, status_code=code, headers=headers or None)


def json_path(loc: tuple[Any, ...]) -> str:
    """("body", "bound", "mechanism", "epsilon") → "$.mechanism.epsilon" (the union's tag is dropped);
    ("query", "page_size") → "query.page_size", ("query", "label", 0) → "query.label[0]"."""
    parts = list(loc)
    where = parts.pop(0) if parts and parts[0] in ("body", "query", "path", "header") else "body"
    if where == "body" and parts and parts[0] in KINDS:
        parts.pop(0)
    path = "$" if where == "body" else where
    for part in parts:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _sentence(err: dict[str, Any], path: str) -> str:
    kind, msg, ctx = err.get("type", ""), err.get("msg", "invalid"), err.get("ctx") or {}
    field = path.rsplit(".", 1)[-1]
    if kind == "missing":
        return f"{path} is required."
    if kind == "extra_forbidden":
        return f"{path} is not a field of this request; remove it."
    if kind == "union_tag_invalid":
        return f"kind {ctx.get('tag')!r} is not an audit kind; use one of: {', '.join(KINDS)}."
    if kind == "union_tag_not_found":
        return f"kind is required; use one of: {', '.join(KINDS)}."
    if kind == "json_invalid":
        return f"The request body is not valid JSON ({ctx.get('error', msg)})."
    if kind == "value_error" and "error" in ctx:
        msg = str(ctx["error"])
    msg = msg.rstrip(".")
    if path == "$":
        return f"{msg[0].upper() + msg[1:]}."
    return f"{field}: {msg[0].lower() + msg[1:]}."


_NAMED = re.compile(r"^([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*): ")


def validation_details(errors: list[dict[str, Any]]) -> list[FieldViolation]:
    details = []
    for err in errors:
        loc = tuple(err.get("loc", ()))
        if err.get("type") == "json_invalid":
            loc = ("body",)
        if err.get("type", "").startswith("union_tag"):
            loc = (*loc, "kind")
        path = json_path(loc)
        named = _NAMED.match(str((err.get("ctx") or {}).get("error", "")))
        if (
            err.get("type") in ("value_error", NO_SOLUTION) and path == "$" and named
        ):  # "field: why" from a model validator
            path = f"$.{named.group(1)}"
            details.append(FieldViolation(path=path, message=str(err["ctx"]["error"]).rstrip(".") + "."))
            continue
        details.append(FieldViolation(path=path, message=_sentence(err, path)))
    return details


def reference(request: Request) -> str:
    """The caller's `X-Request-Id` (if sane) or a fresh id: quoted in the answer, logged with the cause."""
    given = request.headers.get("x-request-id", "")
    return given if re.fullmatch(r"[A-Za-z0-9._-]{1,64}", given) else uuid.uuid4().hex[:16]


class CloseOnServerError:
    """`Connection: close` on every 5xx, so a client's next request on a keep-alive connection goes out on
    a fresh one instead of being reset."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_closing(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] >= 500:
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"connection"]
                message = {**message, "headers": [*headers, (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, send_closing)


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


def install_error_handlers(app: FastAPI) -> None:
    """Handlers for every error the API answers; database outages are 503 with Retry-After, any other
    failure a 500 in the same shape. Neither ever shows SQL, parameters or a stack trace: the cause is
    logged with the request's reference, which the answer quotes."""
    app.add_middleware(CloseOnServerError)

    @app.exception_handler(SQLAlchemyError)
    async def _database(request: Request, exc: SQLAlchemyError) -> JSONResponse:
        ref = reference(request)
        if is_transient(exc):
            log.warning("request %s %s: database unavailable (%s)", ref, request.url.path, short_reason(exc))
            message = f"The database is unavailable for a moment; retry shortly (reference {ref})."
            return error_response(503, message, **{"Retry-After": "1", "X-Request-Id": ref})
        log.error("request %s %s failed", ref, request.url.path, exc_info=exc)
        return _internal_error(ref)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        ref = reference(request)
        log.error("request %s %s failed", ref, request.url.path, exc_info=exc)
        return _internal_error(ref)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = validation_details(list(exc.errors()))
        message = (
            details[0].message
            if len(details) == 1
            else f"{len(details)} problems: " + " ".join(f"{d.message}" for d in details)
        )
        arithmetic = all(err.get("type") == NO_SOLUTION for err in exc.errors())
        return error_response(422, message, details, "NO_SOLUTION" if arithmetic else None)

    @app.exception_handler(Rejected)
    async def _rejected(_: Request, exc: Rejected) -> JSONResponse:
        details = [FieldViolation(path=exc.path, message=exc.message)]
        return error_response(422, exc.message, details, exc.reason)

    @app.exception_handler(InvalidPageToken)
    async def _token(_: Request, exc: InvalidPageToken) -> JSONResponse:
        detail = FieldViolation(path="query.page_token", message=str(exc))
        return error_response(422, str(exc), [detail])

    @app.exception_handler(Conflict)
    async def _conflict(_: Request, exc: Conflict) -> JSONResponse:
        return error_response(409, str(exc))

    @app.exception_handler(ApiError)
    async def _api(_: Request, exc: ApiError) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.code == 401 else {}
        return error_response(exc.code, exc.message, exc.details, exc.reason, **headers, **exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = exc.detail if isinstance(exc.detail, str) else "request failed"
        if exc.status_code == 404 and message == "Not Found":
            message = "No such endpoint."
        headers = dict(exc.headers or {})
        if exc.status_code == 405:
            headers["Allow"] = ", ".join(allowed_methods(request))
            message = f"This path does not take {request.method}; it allows {headers['Allow']}."
        return error_response(exc.status_code, message, **headers)

    @app.exception_handler(TooManyRequests)
    async def _too_many(_: Request, exc: TooManyRequests) -> JSONResponse:
        return error_response(429, exc.message, **{"Retry-After": str(exc.retry_after)})

    @app.exception_handler(TooLarge)
    async def _too_large(_: Request, exc: TooLarge) -> JSONResponse:
        return error_response(413, exc.message, [FieldViolation(path=exc.path, message=exc.message)])

    @app.exception_handler(QuotaExceeded)
    async def _quota(_: Request, exc: QuotaExceeded) -> JSONResponse:
        return error_response(429, str(exc), **{"Retry-After": str(QUOTA_RETRY_SECONDS)})


def _internal_error(ref: str) -> JSONResponse:
    message = f"Internal error (reference {ref}); the operator's log has the details."
    return error_response(500, message, **{"Connection": "close", "X-Request-Id": ref})


_DOCUMENTED = {
    401: "No valid API key: send `Authorization: Bearer <key>`.",
    404: "No such resource (for this API key).",
    413: "The request body is larger than this route's limit: ICLAUDIT_MAX_REQUEST_BYTES (audits), "
    "ICLAUDIT_UPLOAD_MAX_BYTES (uploads) or ICLAUDIT_MAX_SMALL_REQUEST_BYTES (every other route); or a "
    "sweep would store more than ICLAUDIT_SWEEP_MAX_BYTES.",
    422: "Bad input: `details` gives the JSON path of each bad field.",
    429: "Over ICLAUDIT_RATE_LIMIT, ICLAUDIT_WRITE_RATE_LIMIT, the failed-authentication throttle, "
    "ICLAUDIT_MAX_ACTIVE_AUDITS or ICLAUDIT_MAX_SCHEDULES; retry after `Retry-After` seconds.",
    503: "Busy, or the database is unavailable for a moment; retry after `Retry-After` seconds.",
}
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}
}


_SUBMIT = (
    "UNKNOWN_DATASET",
    "DATASET_UNAVAILABLE",
    "DATASET_UNLABELLED",
    "UNKNOWN_MODEL",
    "EGRESS_REFUSED",
    "SECRET_NOT_SET",
    "SECRET_INVALID",
    "SERVER_LIMIT",
    "NO_SOLUTION",
)  # an audit request's checks beyond its schema (app.jobs.service.check_request)
OPERATION_REFUSALS: dict[str, tuple[str, ...]] = {
    "submitAudit": _SUBMIT,
    "planAudit": _SUBMIT,
    "resumeAudit": _SUBMIT,
    "submitSweep": (*_SUBMIT, "GRID_POINT_RULE"),
    "createSchedule": (*_SUBMIT, "GRID_POINT_RULE", "CRON_NEVER_FIRES"),
    "createWebhook": ("EGRESS_REFUSED",),
    "createMlflowSink": ("EGRESS_REFUSED",),
    "uploadDataset": ("UPLOAD_CONTENT",),
    "accountSyntheticGeneration": ("NO_SOLUTION",),
    "calibrateGaussian": ("NO_SOLUTION",),
}
"""operationId → the REFUSALS its 422 can name for a request its schema allows (documented as
`x-refusals`); a 422 of any other operation, or without `reason`, is a rule the schema states."""


def _refusal_answer(answer: dict[str, Any], reasons: dict[str, str]) -> None:
    """The 422 of an operation with `x-refusals`: its `reason` is one of them (or absent: a schema rule)."""
    answer["description"] = (
        "Bad input: `details` gives the JSON path of each bad field. A request its schema allows is refused "
        "only for the state of this server or arithmetic no schema can state, and `reason` then says which: "
        + "; ".join(f"`{code}`: {why}" for code, why in reasons.items())
    )
    reason = {"type": "string", "enum": list(reasons)}
    narrowed = {"properties": {"error": {"properties": {"reason": reason}}}}
    schema = {"allOf": [{"$ref": "#/components/schemas/ErrorResponse"}, narrowed]}
    answer["content"] = {"application/json": {"schema": schema}}


def _operation_errors(path: str, operation: dict[str, Any]) -> set[int]:
    """The error codes an operation can answer, from what it takes: a key (401, 429), a body (413, 422),
    parameters (422), a path id (404), the database (503)."""
    parameters = operation.get("parameters", [])
    authed = "security" in operation or any(
        p.get("in") == "header" and p.get("name", "").lower() == "authorization" for p in parameters
    )
    codes = {401, 429} if authed else set()
    if "requestBody" in operation:
        codes |= {413, 422}
    if parameters:
        codes.add(422)
    if "{" in path:
        codes.add(404)
    if path.startswith("/v1/"):
        codes.add(503)
    return codes


def document_error_responses(app: FastAPI) -> None:
    """Document, on every operation of the OpenAPI document, the error answers it can give (in the error
    shape, with Retry-After on 429/503), whoever added the route; an operation's own entry wins. Wraps
    whatever `app.openapi` is, so call it after anything else that customizes the document."""
    inner = app.openapi
    documented: list[int] = []  # id() of the document already done (inner() caches it)

    def openapi() -> dict[str, Any]:
        schema = inner()
        if id(schema) in documented:
            return schema
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        error_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in error_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components.setdefault("ErrorResponse", error_schema)
        ref = {"$ref": "#/components/schemas/ErrorResponse"}
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                if not isinstance(operation, dict) or "responses" not in operation:
                    continue
                for code in sorted(_operation_errors(path, operation)):
                    answer: dict[str, Any] = {
                        "description": _DOCUMENTED[code],
                        "content": {"application/json": {"schema": ref}},
                    }
                    if code in (429, 503):
                        answer["headers"] = _RETRY_AFTER
                    operation["responses"].setdefault(str(code), answer)
                reasons = OPERATION_REFUSALS.get(operation.get("operationId", ""), ())
                if any(
                    p.get("name", "").lower() == "idempotency-key" for p in operation.get("parameters", [])
                ):
                    reasons = (*reasons, "IDEMPOTENCY_KEY_REUSED")  # app.api.idempotency
                if reasons:
                    operation["x-refusals"] = {reason: REFUSALS[reason] for reason in reasons}
                    _refusal_answer(operation["responses"]["422"], operation["x-refusals"])
                if path == "/readyz":
                    operation["responses"].setdefault(
                        "503",
                        {
                            "description": "Not ready: the database or the broker is unreachable (see `checks`).",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                    )
        documented.append(id(schema))
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
