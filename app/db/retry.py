"""Transient database errors, and retrying them with backoff (tenacity).

Transient: the connection dropped or was invalidated (a failover, `pg_terminate_backend`, a restart), the
server is shutting down or starting up, a serialization failure or deadlock, a lock or statement timeout,
too many connections, a full connection pool, or SQLite's `database is locked`. Anything else — a
constraint, a syntax error, a missing table — is the caller's own error and is never retried.

Backoff: exponential from 50 ms, doubling, capped at 2 s, with jitter, until `max_seconds` have passed;
then the last error is raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session, sessionmaker
from tenacity import RetryCallState, Retrying, retry_if_exception, stop_after_delay, wait_exponential_jitter

log = logging.getLogger(__name__)

T = TypeVar("T")

# PostgreSQL SQLSTATE classes that are the caller's own fault although psycopg calls them OperationalError
_NOT_TRANSIENT_CLASSES = ("54",)  # program limit exceeded (statement too complex, too many columns, …)


def is_transient(exc: BaseException) -> bool:
    """True for errors that a retry a moment later may not meet (see the module docstring)."""
    if isinstance(exc, sa_exc.TimeoutError):  # QueuePool checkout timeout
        return True
    if isinstance(exc, sa_exc.DBAPIError):
        if exc.connection_invalidated:
            return True
        exc = exc.orig if exc.orig is not None else exc
    module = type(exc).__module__
    if module.startswith("psycopg"):
        import psycopg

        if isinstance(exc, psycopg.OperationalError):
            sqlstate = getattr(exc, "sqlstate", None) or ""
            return not sqlstate.startswith(_NOT_TRANSIENT_CLASSES)
        return isinstance(exc, psycopg.InterfaceError)  # "the connection is closed"
    if module == "sqlite3":
        import sqlite3

        text = str(exc).lower()
        return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)
    return isinstance(exc, ConnectionError)


def short_reason(exc: BaseException) -> str:
    """The error's class and SQLSTATE, never its SQL or parameters (for logs read by tenants' operators)."""
    orig = exc.orig if isinstance(exc, sa_exc.DBAPIError) and exc.orig is not None else exc
    sqlstate = getattr(orig, "sqlstate", None)
    return f"{type(orig).__name__}" + (f" (SQLSTATE {sqlstate})" if sqlstate else "")


def _log_retry(what: str) -> Callable[[RetryCallState], None]:
    def before_sleep(state: RetryCallState) -> None:
        error = state.outcome.exception() if state.outcome else None
        log.warning(
            "%s: transient database error %s; retry %d in %.2f s",
            what,
            short_reason(error) if error else "?",
            state.attempt_number,
            state.next_action.sleep if state.next_action else 0.0,
        )

    return before_sleep


def retrying(max_seconds: float, *, what: str) -> Retrying:
    """A tenacity loop over transient errors: `for attempt in retrying(…): with attempt: …`."""
    return Retrying(
        retry=retry_if_exception(is_transient),
        wait=wait_exponential_jitter(initial=0.05, max=2.0, jitter=0.05),
        stop=stop_after_delay(max_seconds),
        before_sleep=_log_retry(what),
        reraise=True,
    )


def in_transaction(
    session_factory: sessionmaker[Session], fn: Callable[[Session], T], *, max_seconds: float, what: str
) -> T:
    """`fn(session)` in its own transaction, re-run from the start on a transient error. `fn` must be safe
    to run twice (every runner write is attempt-guarded, so a commit whose answer was lost is harmless)."""
    for attempt in retrying(max_seconds, what=what):
        with attempt, session_factory.begin() as session:
            return fn(session)
    raise AssertionError("unreachable: tenacity reraises")  # pragma: no cover
