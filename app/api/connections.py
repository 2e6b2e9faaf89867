"""How `iclaudit serve` runs uvicorn against slow or half-open connections.

uvicorn closes an idle keep-alive connection after `timeout_keep_alive`, but a connection that opens and
never completes its request headers is kept for ever (1,500 half-open connections were all open after
60 s). `HeaderTimeoutH11Protocol` is uvicorn's h11 protocol with a deadline for the headers: a connection
that has not sent a whole request line and headers within ICLAUDIT_HEADER_TIMEOUT_SECONDS of opening (or
of its previous answer) is closed. h11 also bounds the headers' size (`h11_max_incomplete_event_size`,
ICLAUDIT_MAX_HEADER_BYTES: more is 400). The body is bounded apart, per route, in time and size
(app.api.middleware.body_limit.BodyLimit: ICLAUDIT_BODY_TIMEOUT_SECONDS between two pieces, the routes' byte limits).

`StreamSlots` caps the connections a tenant holds open in one API process: its event streams
(`GET /v1/audits/{id}/events`) and long-polls (`?wait=`) together, ICLAUDIT_MAX_OPEN_STREAMS; one more is
429 naming the setting, with Retry-After. (Uploads have their own cap, ICLAUDIT_MAX_CONCURRENT_UPLOADS;
an ordinary request is over in milliseconds and counted by the rate limits.)
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from uvicorn.protocols.http.h11_impl import H11Protocol

from app.api.state import state_of

if TYPE_CHECKING:
    from app.config import Settings


class HeaderTimeoutH11Protocol(H11Protocol):
    """H11Protocol that closes a connection whose request headers do not arrive within `header_timeout`
    (None: ICLAUDIT_HEADER_TIMEOUT_SECONDS, read at the first connection; a module-level class, so that
    uvicorn can hand it to the worker processes of `iclaudit serve --workers N`)."""

    header_timeout: float | None = None
    _header_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_timer()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_timer()  # the next request on this connection gets the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def _arm_header_timer(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
        if type(self).header_timeout is None:
            from app.config import get_settings

            type(self).header_timeout = get_settings().header_timeout_seconds
        self._header_timer = self.loop.call_later(self.header_timeout or 10.0, self._headers_timed_out)

    def _headers_timed_out(self) -> None:
        self._header_timer = None
        waiting = self.cycle is None or self.cycle.response_complete  # no request in progress
        if waiting and not self.transport.is_closing():
            self.transport.close()


def serve_options(settings: Settings) -> dict[str, Any]:
    """uvicorn.run keyword arguments: the h11 protocol with the header deadline, the header size limit and
    the keep-alive timeout from the settings."""
    HeaderTimeoutH11Protocol.header_timeout = settings.header_timeout_seconds  # a worker process: from env
    return {
        "http": HeaderTimeoutH11Protocol,
        "h11_max_incomplete_event_size": settings.max_header_bytes,
        "timeout_keep_alive": settings.keep_alive_seconds,
    }


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Everything `iclaudit serve` hands uvicorn.run besides the app, host, port and workers
    (`serve_options`, and the logging: app.observability's handler on the root logger, set up by uvicorn
    in every worker process too), so bench/bare_app.py serves its baseline app the same way."""
    log_config = {
        "version": 1,
        "disable_existing_loggers": False,
        "handlers": {"default": {"()": "app.observability.log_handler", "fmt": settings.log_format}},
        "root": {"handlers": ["default"], "level": settings.log_level.upper()},
    }
    return {"log_config": log_config, **serve_options(settings)}


def shared_limits(settings: Settings) -> bool:
    """Whether the rate limits are counted where every API process sees them (Redis), as several processes
    (`iclaudit serve --workers N`) need; in one process's memory each would allow the whole limit."""
    url = settings.rate_limit_storage or settings.broker_url or "memory://"
    return not url.startswith("memory")


STREAM_RETRY_SECONDS = 5


class StreamSlots:
    """Open streams and long-polls per tenant in this process (counted on the event loop)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open: dict[str, int] = {}

    def take(self, tenant_id: str) -> Callable[[], None]:
        """Count one more open stream of the tenant and return its release (idempotent: call it from every
        way out); TooManyRequests past the limit."""
        from app.api.errors import TooManyRequests

        held = self.open.get(tenant_id, 0)
        if held >= self.limit:
            raise TooManyRequests(
                f"This tenant already holds {held} event streams and long-polls open here; at most "
                f"{self.limit} at once (ICLAUDIT_MAX_OPEN_STREAMS). Close one, or poll with If-None-Match.",
                STREAM_RETRY_SECONDS,
            )
        self.open[tenant_id] = held + 1
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.open[tenant_id] -= 1
                if not self.open[tenant_id]:
                    del self.open[tenant_id]

        return release


def stream_slots(app: Starlette) -> StreamSlots:
    """The app's StreamSlots (made on first use, on the event loop)."""
    state = state_of(app)
    if state.stream_slots is None:
        state.stream_slots = StreamSlots(state.settings.max_open_streams)
    return state.stream_slots


PLAN_RETRY_SECONDS = 5


class PlanSlots:
    """One plan at a time per tenant in this process. A plan rehearses the audit's own computation in the
    API process (app/audit/plan.py: seconds of CPU), so a tenant sending many at once would hold the
    request slots and the CPU the polls need: the second is 429 until the first answers."""

    def __init__(self) -> None:
        self._busy: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """Plans being computed now."""
        return len(self._busy)

    @contextlib.contextmanager
    def hold(self, tenant_id: str) -> Iterator[None]:
        from app.api.errors import TooManyRequests

        with self._lock:
            if tenant_id in self._busy:
                raise TooManyRequests(
                    "This tenant's previous plan is still being computed here; plans run one at a time per "
                    "tenant. Retry when it has answered.",
                    PLAN_RETRY_SECONDS,
                )
            self._busy.add(tenant_id)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(tenant_id)


plan_slots = PlanSlots()
