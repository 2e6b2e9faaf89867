"""Structured logs and request ids, as platforms expect them.

- Every request gets an id: the caller's `X-Request-ID` (1–128 printable characters) or a fresh one,
  echoed in the answer's `X-Request-ID` (asgi-correlation-id's middleware; its ContextVar
  `asgi_correlation_id.correlation_id` holds it while the request runs).
- The id travels with the audit it created: the inline executor runs the audit in a copy of the submitting
  request's context, the Celery executor sends it as the task's `request_id` keyword, and the runner binds
  it with the audit's id (`bind(audit_id=…, request_id=…)`), so every log line of that audit carries both.
- Query strings are never logged: the access log's request lines, httpx's `HTTP Request:` lines (webhook
  deliveries, endpoint calls) and any other URL or path in a message keep `?[redacted]` in place of the
  query (a `notify` or endpoint URL may carry a token there; `RedactQueries`).
- Log lines are JSON objects on stderr (`ICLAUDIT_LOG_FORMAT=json`, the default; `text` for people):
  time, level, logger, message, and `request_id`, `audit_id`, `tenant` whenever they are known.
"""

from __future__ import annotations

import itertools
import logging
import os
import re
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from asgi_correlation_id import CorrelationIdMiddleware, correlation_id
from pythonjsonlogger.json import JsonFormatter
from starlette.middleware import Middleware

audit_id: ContextVar[str | None] = ContextVar("iclaudit_audit_id", default=None)
tenant: ContextVar[str | None] = ContextVar("iclaudit_tenant", default=None)
request_id = correlation_id
"""The current request's id (set by the middleware per request, by `bind` in a runner)."""

_VARS: dict[str, ContextVar[str | None]] = {"request_id": request_id, "audit_id": audit_id, "tenant": tenant}
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ContextFilter(logging.Filter):
    """Copy request_id, audit_id and tenant from the context onto every record (None when unknown)."""

    def filter(self, record: logging.LogRecord) -> bool:
        for name, var in _VARS.items():
            if getattr(record, name, None) is None:
                setattr(record, name, var.get())
        return True


# A URL (scheme://...) or an absolute path (after a space, a quote or `(`) followed by a query string.
_QUERY = re.compile(r"""((?:[A-Za-z][A-Za-z0-9+.-]*://|(?<=[\s"'(])/)[^\s?#"']*)\?[^\s#"']*""")
REDACTED = "?[redacted]"


def redact_queries(text: str) -> str:
    """`text` with every URL's or path's query string replaced by `?[redacted]`."""
    return _QUERY.sub(lambda m: m.group(1) + REDACTED, text)


class RedactQueries(logging.Filter):
    """Replace the query string of every URL or path in a record's message (tokens ride in them): the access log
    logs `GET /v1/audits?page_token=...`, httpx `HTTP Request: POST https://hook/x?token=...`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "?" in message:
            redacted = redact_queries(message)
            if redacted != message:
                record.msg, record.args = redacted, ()
        return True


class _Json(JsonFormatter):
    def process_log_record(self, log_data: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in log_data.items() if v is not None}  # unknown context is left out


def log_handler(stream: Any = None, fmt: str = "json") -> logging.Handler:
    """A handler writing JSON (or text) lines with the context fields to `stream` (stderr)."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(RedactQueries())
    if fmt == "json":
        handler.setFormatter(
            _Json(
                "%(asctime)s %(levelname)s %(name)s %(message)s %(request_id)s %(audit_id)s %(tenant)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    return handler


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """One stderr handler on the root logger (uvicorn's and Celery's loggers propagate to it)."""
    handler = log_handler(sys.stderr, fmt)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())


@contextmanager
def bind(**values: str | None) -> Iterator[None]:
    """Set request_id / audit_id / tenant for the block (a runner thread, a Celery task)."""
    tokens = [(_VARS[name], _VARS[name].set(value)) for name, value in values.items() if value is not None]
    try:
        yield
    finally:
        for var, token in reversed(tokens):
            var.reset(token)


def valid_request_id(value: str) -> bool:
    """Accept a caller's id when it is 1–128 printable ASCII characters without spaces."""
    return 0 < len(value) <= 128 and value.isascii() and value.isprintable() and " " not in value


_ID_PREFIX = uuid.uuid4().hex[:16]
_id_counter = itertools.count(1)


def _new_id_prefix() -> None:
    global _ID_PREFIX, _id_counter
    _ID_PREFIX, _id_counter = uuid.uuid4().hex[:16], itertools.count(1)


os.register_at_fork(after_in_child=_new_id_prefix)  # a forked API process numbers its own requests


def new_request_id() -> str:
    """A fresh request id: 32 hex digits, this process's random half then a counter (unique without a
    system call per request, as uuid4 makes)."""
    return f"{_ID_PREFIX}{next(_id_counter):016x}"


def request_id_for(given: str | None) -> str:
    """The id a request carries: the caller's X-Request-ID when valid, else a fresh one (as the
    middleware decides; app.api.poll answers without it)."""
    return given if given and valid_request_id(given) else new_request_id()


def request_ids() -> Middleware:
    """The middleware that puts X-Request-ID in (kept when valid) and out, on every answer."""
    return Middleware(
        CorrelationIdMiddleware,
        header_name="X-Request-ID",
        generator=new_request_id,
        validator=valid_request_id,
        transformer=lambda value: value,
    )
