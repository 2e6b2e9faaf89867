"""The API's exceptions and its one error shape, `{"error": {code, status, message, details: [{path,
message}]}}`: a sentence a person understands and, for bad input, the JSON path of each offending field.
A leaf: it imports nothing from app.api (the handlers that render these are app/api/handlers.py)."""

from __future__ import annotations

import re
from typing import Any

from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from app import secrets
from app.audit.kinds.registry import KINDS
from app.schemas.errors import NO_SOLUTION, ErrorBody, ErrorResponse, FieldViolation

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


class RequestTooLarge(HTTPException):
    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(
            413, f"The request body is larger than this service's limit of {limit} bytes ({setting})."
        )


class RequestTimeout(HTTPException):
    def __init__(self, seconds: float) -> None:
        super().__init__(
            408,
            f"The request body stopped arriving: nothing for {seconds:g} s (ICLAUDIT_BODY_TIMEOUT_SECONDS).",
            headers={"Connection": "close"},
        )


class TooManyRequests(Exception):
    """Answered 429 with `Retry-After: seconds`; `message` says which limit and its setting."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.message = message
        self.retry_after = max(1, retry_after)


def error_response(
    code: int,
    message: str,
    details: list[FieldViolation] | None = None,
    reason: str | None = None,
    /,
    **headers: str,
) -> JSONResponse:
    """The error answer; `reason` (REFUSALS) only for a refusal no schema can predict, else left out.
    `headers` by name (positional-only arguments before them, so any header name is one)."""
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
