"""Strict JSON at the door (pure ASGI): `NaN`, `Infinity` and `-Infinity` are not JSON (RFC 8259 §6), though
Python's parser takes them, and `1e309` is JSON no double holds; a JSON body holding one is 422 naming its
path, and so is one nested past the parser's depth. Anything else goes on unchanged (malformed JSON is reported by the route's own parsing).

It buffers the body (the body limit, outside it, bounds that), parses it once with `parse_constant`
refusing, then replays it to the app."""

from __future__ import annotations

import json
import math
from typing import Any

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class _Constant:
    def __init__(self, token: str) -> None:
        self.token = token


def _refuse(token: str) -> Any:
    raise _NonFinite(token)


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):  # 1e309: valid JSON, but no double holds it
        raise _NonFinite(text)
    return value


def _finite_or_marked(text: str) -> float | _Constant:
    value = float(text)
    return _Constant(text) if math.isinf(value) else value


class _NonFinite(ValueError):
    pass


def _paths_of_constants(document: Any) -> list[tuple[str, str]]:
    """(JSON path, token) of every `_Constant` in a parsed document (iterative: depth is not a problem)."""
    found, stack = [], [("$", document)]
    while stack:
        path, node = stack.pop()
        if isinstance(node, _Constant):
            found.append((path, node.token))
        elif isinstance(node, dict):
            stack.extend((f"{path}.{key}", value) for key, value in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((f"{path}[{i}]", value) for i, value in reversed(list(enumerate(node))))
    return found


def problem(body: bytes) -> tuple[str, list[tuple[str, str]]] | None:
    """(message, [(path, sentence)]) when `body` is JSON this service refuses; None otherwise."""
    try:
        json.loads(body, parse_constant=_refuse, parse_float=_finite)
    except _NonFinite:
        where = _paths_of_constants(json.loads(body, parse_constant=_Constant, parse_float=_finite_or_marked))
        details = [
            (path, f"{path.rsplit('.', 1)[-1]}: {token} is not a finite JSON number; send a finite number.")
            for path, token in where[:20]
        ]
        return details[0][1], details
    except RecursionError:
        message = "The request body is nested too deeply to be read as JSON."
        return message, [("$", message)]
    except UnicodeDecodeError as exc:
        message = f"The request body is not valid JSON: not UTF-8 (byte {exc.start})."
        return message, [("$", message)]
    except ValueError:
        return None  # not JSON at all: the route reports it
    return None


class StrictJSON:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        content_type = Headers(scope=scope).get("content-type", "") if scope["type"] == "http" else ""
        media = content_type.split(";", 1)[0].strip().lower()
        if not (
            media == "application/json" or (media.startswith("application/") and media.endswith("+json"))
        ):
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
        found = problem(body)
        if found is not None:
            from app.api.errors import error_response
            from app.schemas.errors import FieldViolation

            message_text, details = found
            violations = [FieldViolation(path=path, message=text) for path, text in details]
            await error_response(422, message_text, violations)(scope, receive, send)
            return
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
