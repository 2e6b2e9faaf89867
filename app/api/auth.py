"""Who the caller is: one `Authenticator` per app, used by the routes (app/api/deps.py) and the middleware
(app/api/middleware/auth_first.py, app/api/middleware/poll.py) alike.

A caller sends `Authorization: Bearer <key>` (with authentication off every caller is the default
tenant). The checked way (`tenant`, `verify`, `recheck`) reads the key's row in a session, in a worker
thread, after the failed-authentication throttles. A key verified in this process in the last few
seconds is remembered (app.db.keys.remembered), so `remembered` answers from memory on the event loop,
and `count` (or `count_async`, with the limits shared in Redis) then makes the checks and counts the
checked way would have made. A remembered key is re-read in the background once past half its memo's
TTL, so a fleet polling with one key never meets an expired memo all at once.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import anyio
from anyio import to_thread
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette
from starlette.requests import HTTPConnection, Request
from starlette.types import Scope

from app.api.errors import ApiError
from app.api.limits import Guard
from app.api.sessions import in_session, run_in_session
from app.api.state import state_of
from app.db import keys
from app.db.retry import short_reason

log = logging.getLogger(__name__)

MISSING_KEY = "Send `Authorization: Bearer <API key>`; `iclaudit keys create --tenant NAME` makes one."
UNKNOWN_KEY = "This API key is unknown or revoked."


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request says about its caller: the Authorization header, the client's address and the
    method (writes count against ICLAUDIT_WRITE_RATE_LIMIT too)."""

    authorization: str | None
    address: str
    method: str

    @classmethod
    def of(cls, connection: HTTPConnection, authorization: str | None) -> Credentials:
        client = connection.client
        method = connection.scope.get("method", "GET")
        return cls(authorization, client.host if client else "unknown", method)

    @classmethod
    def of_scope(cls, scope: Scope) -> Credentials:
        authorization = None
        for name, value in scope["headers"]:
            if name == b"authorization":
                authorization = value.decode("latin-1")
                break
        client = scope.get("client")
        return cls(authorization, client[0] if client else "unknown", scope["method"])

    def key(self) -> str:
        """The bearer key; 401 without one."""
        scheme, _, key = (self.authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key:
            raise ApiError(401, MISSING_KEY)
        return key


def authenticator_of(app: Starlette) -> Authenticator:
    return state_of(app).authenticator


class Authenticator:
    """The caller's tenant id from its credentials, checked and counted against the tenant's rate limits.
    `default_tenant_id` is every caller's tenant while authentication is off (None when it is on)."""

    def __init__(
        self,
        *,
        guard: Guard,
        default_tenant_id: str | None,
        session_factory: sessionmaker[Session],
        db_slots: anyio.Semaphore,
    ) -> None:
        self._guard = guard
        self._default_tenant_id = default_tenant_id
        self._sessions = session_factory
        self._db_slots = db_slots
        self._renewing: set[str] = set()
        self._renewals: set[asyncio.Task[None]] = set()

    def _auth_off(self) -> bool:
        return self._default_tenant_id is not None

    @property
    def _default(self) -> str:
        """The default tenant (only read while authentication is off)."""
        assert self._default_tenant_id is not None
        return self._default_tenant_id

    def tenant(self, session: Session, credentials: Credentials) -> str:
        """The caller's tenant id (the default tenant when auth is off), after the failed-authentication
        throttles, counted against the tenant's rate limits (429 over ICLAUDIT_RATE_LIMIT or
        ICLAUDIT_WRITE_RATE_LIMIT). A key verified in the last few seconds costs no database read."""
        tenant_id = self._default if self._auth_off() else self.verify(session, credentials)
        self._guard.request(tenant_id, credentials.method)
        return tenant_id

    def verify(self, session: Session, credentials: Credentials) -> str:
        """The tenant of a valid key (auth on), after the failed-authentication throttles; 401 or 429
        otherwise. Counts no request against the tenant's limits (`tenant` does): AuthenticateFirst verifies a
        caller before its body is read, and the route then finds the key remembered."""
        key = credentials.key()
        parsed = keys.parse_api_key(key)
        key_id = parsed[0] if parsed else None
        self._guard.before_authentication(key, key_id, credentials.address)  # 429 before any scrypt
        found = keys.authenticated_tenant_id(session, key)
        if found is None:
            self._guard.authentication_failed(key, key_id, credentials.address)
            raise ApiError(401, UNKNOWN_KEY)
        self._guard.authenticated(key)
        return found

    def recheck(self, session: Session, credentials: Credentials) -> str:
        """The caller's tenant again, its key's row read afresh (a revocation by any process is seen; no
        scrypt): what a long-poll or an event stream does at least every ICLAUDIT_KEY_RECHECK_SECONDS
        while it waits. 401 once the key is revoked. Counts nothing."""
        if self._auth_off():
            return self._default
        found = keys.authenticated_tenant_id(session, credentials.key(), max_age=0)
        if found is None:
            raise ApiError(401, UNKNOWN_KEY)
        return found

    def remembered(self, credentials: Credentials, *, on_loop: bool = False) -> str | None:
        """`tenant`'s answer when it needs neither the database nor I/O (auth off, or a key verified here
        within the memo's TTL); None when it does. Checks and counts nothing: `count` does, once the
        caller answers from memory. Without `on_loop` only while the limits count in this process's
        memory; with it (the caller counts with `count_async`) also with limits shared in Redis, for a key
        the failure throttles pass at once (`Guard.known_good`: they check nothing)."""
        guard = self._guard
        if not guard.local and not on_loop:
            return None
        if self._auth_off():
            return self._default
        scheme, _, key = (credentials.authorization or "").partition(" ")
        key = key.strip()
        if scheme.lower() != "bearer" or not key or not (guard.local or guard.known_good(key)):
            return None
        found = keys.remembered(key)
        if found is None:
            return None
        if found[1] > keys.VERIFIED_TTL_SECONDS / 2:
            self._renew_soon(key)
        return found[0]

    def count(self, credentials: Credentials, tenant_id: str) -> None:
        """The checks and counts `tenant` makes around a successful authentication (429s included), for a
        caller `remembered` recognised."""
        guard = self._guard
        if not self._auth_off():
            key = credentials.key()
            parsed = keys.parse_api_key(key)
            guard.before_authentication(key, parsed[0] if parsed else None, credentials.address)
            guard.authenticated(key)
        guard.request(tenant_id, credentials.method)

    async def count_async(self, credentials: Credentials, tenant_id: str) -> None:
        """`count` for a caller `remembered(on_loop=True)` recognised: limits shared in Redis are counted on
        the event loop (`Guard.request_async`), with no thread."""
        if self._guard.local:
            self.count(credentials, tenant_id)
        else:
            await self._guard.request_async(tenant_id, credentials.method)

    async def caller(self, request: Request, credentials: Credentials) -> str:
        """`tenant` for a route that must not hold a session while it reads its body (an upload): from
        memory for a key verified moments ago (AuthenticateFirst verifies a caller that sends a body), else in one
        brief session under a request slot, given back before the route goes on."""
        remembered = self.remembered(credentials)
        if remembered is not None:
            self.count(credentials, remembered)
            return remembered
        return await run_in_session(request, self.tenant, credentials)

    def _renew_soon(self, key: str) -> None:
        """Re-read a remembered key's row in the background (one at a time per key) before its memo runs
        out. A key revoked elsewhere is still refused within the memo's TTL."""
        if key in self._renewing:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a worker thread: the next poll on the event loop renews it
            return
        self._renewing.add(key)
        task = loop.create_task(self._renew(key))
        self._renewals.add(task)
        task.add_done_callback(self._renewals.discard)

    async def _renew(self, key: str) -> None:
        try:
            async with self._db_slots:
                await to_thread.run_sync(in_session, self._sessions, _reread_key, (key,))
        except Exception as exc:  # the memo then runs out and the next poll reads the row itself
            log.warning("renewing a verified key failed (%s)", short_reason(exc))
        finally:
            self._renewing.discard(key)


def _reread_key(session: Session, key: str) -> str | None:
    return keys.authenticated_tenant_id(session, key, max_age=0)
