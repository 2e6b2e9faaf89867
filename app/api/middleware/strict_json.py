"""Strict JSON at the door (pure ASGI), parsed once and off the event loop.

`NaN`, `Infinity` and `-Infinity` are not JSON (RFC 8259 §6), though Python's parser takes them, and `1e309`
is JSON no double holds; a JSON body holding one is 422 naming its path (the first 20), and so is one nested
past the parser's depth or not UTF-8. Malformed JSON is left to the route, which reports it as FastAPI does.

Only what a route will read is looked at: a POST, PUT or PATCH under /v1/ with a JSON media type. By then
`app.api.middleware.auth_first.AuthenticateFirst` has authenticated the caller (no body is read for a caller without a
valid key) and `app.api.middleware.body_limit.BodyLimit` bounds the body per route.

One pass: the body is parsed once, with hooks that mark each non-finite number instead of raising, so a
valid body's document is the one the route gets (`StrictJSONRoute` hands it over instead of parsing again)
and an invalid one is walked only up to its first 20 marks (no path string per value). A body of
`PARSE_INLINE_BYTES` or more is parsed in a worker thread; the float and int hooks are Python functions,
so the thread gives the interpreter lock back to the event loop at every number and `/healthz` and other
requests go on while a large body is parsed. (A body of arrays, strings and literals with no number at all
is parsed by the C scanner without a pause; the per-route limits bound how long that takes.)
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

from anyio import to_thread
from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

PARSE_INLINE_BYTES = 64 * 1024
"""Smaller bodies are parsed on the event loop (a thread hop would cost more than the parse)."""
MAX_REPORTED = 20
PARSED = "iclaudit.parsed_json"
"""Scope key: the parsed document of a body StrictJSON accepted, or `Unparsable` for malformed JSON."""
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def is_v1_write(scope: Scope) -> bool:
    """An HTTP POST, PUT or PATCH under /v1: the requests whose bodies the middlewares here and in
    app/api/middleware/auth_first.py look at."""
    return scope["type"] == "http" and scope["method"] in _BODY_METHODS and scope["path"].startswith("/v1/")


class JsonRefused(ValueError):
    """JSON this service will not take: `message` and `details` [(JSON path, sentence)]."""

    def __init__(self, message: str, details: list[tuple[str, str]]) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class Unparsable:
    """The route's `request.json()` raises `error` (FastAPI answers it 422, as for any malformed body)."""

    def __init__(self, error: json.JSONDecodeError) -> None:
        self.error = error


class _Mark:
    """Where a non-finite number stood in the document (its token as written)."""

    __slots__ = ("token",)

    def __init__(self, token: str) -> None:
        self.token = token


_CONSTANTS = {token: _Mark(token) for token in ("NaN", "Infinity", "-Infinity")}


def _children(node: dict[str, Any] | list[Any]) -> Iterator[tuple[str | int, Any]]:
    return iter(node.items()) if isinstance(node, dict) else enumerate(node)


def _step(key: str | int) -> str:
    return f"[{key}]" if isinstance(key, int) else f".{key}"


def _marks(document: Any, limit: int = MAX_REPORTED) -> list[tuple[str, str]]:
    """(JSON path, token) of the first `limit` marks in document order (iterative; paths built only for
    containers and marks, and the walk stops at the limit)."""
    if isinstance(document, _Mark):
        return [("$", document.token)]
    if not isinstance(document, dict | list):
        return []
    found: list[tuple[str, str]] = []
    stack = [("$", _children(document))]
    while stack:
        path, children = stack[-1]
        for key, value in children:
            if isinstance(value, _Mark):
                found.append((path + _step(key), value.token))
                if len(found) >= limit:
                    return found
            elif isinstance(value, dict | list):
                stack.append((path + _step(key), _children(value)))
                break
        else:
            stack.pop()
    return found


def parse(body: bytes) -> Any:
    """The document, in one pass; JsonRefused for a body with a non-finite number, nested too deeply or not
    UTF-8; json.JSONDecodeError for a body that is not JSON."""
    marked = 0

    def constant(token: str) -> _Mark:
        nonlocal marked
        marked += 1
        return _CONSTANTS[token]

    def number(text: str) -> float | _Mark:
        nonlocal marked
        value = float(text)
        if math.isinf(value):  # 1e309: valid JSON, but no double holds it
            marked += 1
            return _Mark(text)
        return value

    def integer(text: str) -> int:  # a Python function, so a long parse yields the interpreter lock
        return int(text)

    try:
        document = json.loads(body, parse_constant=constant, parse_float=number, parse_int=integer)
    except RecursionError:
        message = "The request body is nested too deeply to be read as JSON."
        raise JsonRefused(message, [("$", message)]) from None
    except UnicodeDecodeError as exc:
        message = f"The request body is not valid JSON: not UTF-8 (byte {exc.start})."
        raise JsonRefused(message, [("$", message)]) from None
    if marked:
        details = [
            (path, f"{path.rsplit('.', 1)[-1]}: {token} is not a finite JSON number; send a finite number.")
            for path, token in _marks(document)
        ]
        raise JsonRefused(details[0][1], details)
    return document


async def parse_off_loop(body: bytes) -> Any:
    """`parse(body)`, in a worker thread when the body is large."""
    if len(body) < PARSE_INLINE_BYTES:
        return parse(body)
    return await to_thread.run_sync(parse, body)


def _is_json(scope: Scope) -> bool:
    media = Headers(scope=scope).get("content-type", "").split(";", 1)[0].strip().lower()
    return media == "application/json" or (media.startswith("application/") and media.endswith("+json"))


class StrictJSON:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not (is_v1_write(scope) and _is_json(scope)):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                await self.app(scope, _replay(message, receive), send)
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        del chunks
        if body:
            try:
                scope[PARSED] = await parse_off_loop(body)
            except JsonRefused as exc:
                from app.api.errors import error_response
                from app.schemas.errors import FieldViolation

                violations = [FieldViolation(path=path, message=text) for path, text in exc.details]
                await error_response(422, exc.message, violations)(scope, receive, send)
                return
            except json.JSONDecodeError as exc:
                scope[PARSED] = Unparsable(exc)
        await self.app(
            scope, _replay({"type": "http.request", "body": body, "more_body": False}, receive), send
        )


def _replay(first: Message, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return first
        return await receive()

    return replayed


class _ParsedRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            parsed = self.scope.get(PARSED, _NOTHING)
            if isinstance(parsed, Unparsable):
                raise parsed.error
            if parsed is _NOTHING:  # not seen by StrictJSON: parse here, still off the loop when large
                body = await self.body()
                parsed = json.loads(body) if len(body) < PARSE_INLINE_BYTES else await _plain(body)
            self._json = parsed
        return self._json


_NOTHING = object()


async def _plain(body: bytes) -> Any:
    return await to_thread.run_sync(json.loads, body)


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is the document StrictJSON already parsed (not parsed again on the event
    loop). Routers with JSON bodies use it: `APIRouter(..., route_class=StrictJSONRoute)`."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(_ParsedRequest(request.scope, request.receive, request._send))

        return handle
