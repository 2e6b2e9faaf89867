"""Database sessions for requests: one of ICLAUDIT_API_CONCURRENCY request slots per session, so a
request never waits for a connection while it holds a thread (the pool has one per slot)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import anyio
from anyio import to_thread
from sqlalchemy.orm import Session
from starlette.requests import Request

from app.api.errors import ApiError
from app.api.state import state_of
from app.db.retry import short_reason

log = logging.getLogger(__name__)
T = TypeVar("T")


@contextlib.asynccontextmanager
async def request_slot(request: Request) -> AsyncIterator[None]:
    """One of ICLAUDIT_API_CONCURRENCY slots for the block. Waiting for a slot costs no thread and no
    connection; past ICLAUDIT_API_QUEUE_SECONDS the answer is 503 with Retry-After."""
    state = state_of(request.app)
    slots = state.db_slots
    acquired = False
    with anyio.move_on_after(state.settings.api_queue_seconds):
        await slots.acquire()
        acquired = True
    if not acquired:
        raise ApiError(503, "The service is busy; retry in a moment.", headers={"Retry-After": "1"})
    try:
        yield
    finally:
        slots.release()


def _close(session: Session) -> None:
    try:
        session.close()
    except Exception as exc:  # a connection that died under us: the pool replaces it
        log.warning("session close failed (%s)", short_reason(exc))


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session, while holding one of the request slots (`request_slot`). The pool has a connection per
    slot, so a request never waits for one while holding a thread (no pool stall)."""
    async with request_slot(request):
        session = state_of(request.app).session_factory()
        try:
            yield session
        finally:
            await to_thread.run_sync(_close, session)


def in_session(factory: Callable[[], Session], step: Callable[..., T], args: tuple[Any, ...]) -> T:
    session = factory()
    try:
        return step(session, *args)
    finally:
        _close(session)


async def run_in_session(request: Request, step: Callable[..., T], *args: Any) -> T:
    """`step(session, *args)` in one worker thread, in a session opened and closed there, under one request
    slot: a single thread hop for a short step (a poll), and nothing held once it returns."""
    async with request_slot(request):
        return await to_thread.run_sync(in_session, state_of(request.app).session_factory, step, args)
