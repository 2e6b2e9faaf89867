"""Annotated dependencies: the settings, a database session, the caller's tenant, the executor."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from typing import Annotated, Any, Literal, TypeVar

import anyio
from anyio import to_thread
from fastapi import Depends, Header, Query, Request
from sqlalchemy.orm import Session

from app.api.errors import ApiError
from app.api.limits import Guard
from app.config import Settings
from app.db import keys
from app.db.models import Tenant
from app.db.retry import short_reason
from app.db.scoping import PAGE_TOKEN_PATTERN
from app.jobs.executors import Executor

log = logging.getLogger(__name__)
T = TypeVar("T")


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


@contextlib.asynccontextmanager
async def request_slot(request: Request) -> AsyncIterator[None]:
    """One of ICLAUDIT_API_CONCURRENCY slots for the block. Waiting for a slot costs no thread and no
    connection; past ICLAUDIT_API_QUEUE_SECONDS the answer is 503 with Retry-After."""
    slots: anyio.Semaphore = request.app.state.db_slots
    acquired = False
    with anyio.move_on_after(request.app.state.settings.api_queue_seconds):
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
        session = request.app.state.session_factory()
        try:
            yield session
        finally:
            await to_thread.run_sync(_close, session)


def _in_session(factory: Callable[[], Session], step: Callable[..., T], args: tuple[Any, ...]) -> T:
    session = factory()
    try:
        return step(session, *args)
    finally:
        _close(session)


async def run_in_session(request: Request, step: Callable[..., T], *args: Any) -> T:
    """`step(session, *args)` in one worker thread, in a session opened and closed there, under one request
    slot: a single thread hop for a short step (a poll), and nothing held once it returns."""
    async with request_slot(request):
        return await to_thread.run_sync(_in_session, request.app.state.session_factory, step, args)


def get_executor(request: Request) -> Executor:
    return request.app.state.executor


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]
ExecutorDep = Annotated[Executor, Depends(get_executor)]


def _bearer(authorization: str | None) -> str:
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise ApiError(
            401, "Send `Authorization: Bearer <API key>`; `iclaudit keys create --tenant NAME` makes one."
        )
    return key


def tenant_id_of(request: Request, session: Session, authorization: str | None) -> str:
    """The caller's tenant id from `Authorization: Bearer <key>` (the default tenant when auth is off),
    after the failed-authentication throttles and counted against the tenant's rate limits. A key verified
    in the last few seconds costs no database read (app.db.keys.authenticated_tenant_id)."""
    guard: Guard = request.app.state.guard
    if not request.app.state.settings.auth_enabled:
        tenant_id: str = request.app.state.default_tenant_id
        guard.request(tenant_id, request.method)
        return tenant_id
    found = verified_tenant_id(session, request, authorization)
    guard.request(found, request.method)  # 429 over ICLAUDIT_RATE_LIMIT / ICLAUDIT_WRITE_RATE_LIMIT
    return found


def verified_tenant_id(session: Session, request: Request, authorization: str | None) -> str:
    """The tenant of a valid key (auth on), after the failed-authentication throttles; 401 or 429 otherwise.
    Counts no request against the tenant's rate limits (`tenant_id_of` does): app.api.gate calls it before
    a body is read, and the route then finds the key verified in memory."""
    guard: Guard = request.app.state.guard
    key = _bearer(authorization)
    parsed = keys.parse_api_key(key)
    key_id = parsed[0] if parsed else None
    address = request.client.host if request.client else "unknown"
    guard.before_authentication(key, key_id, address)  # 429 before scrypt once over the failure limits
    found = keys.authenticated_tenant_id(session, key)
    if found is None:
        guard.authentication_failed(key, key_id, address)
        raise ApiError(401, "This API key is unknown or revoked.")
    guard.authenticated(key)
    return found


def _tenant_step(session: Session, request: Request, authorization: str | None) -> str:
    return tenant_id_of(request, session, authorization)


async def caller_tenant_id(request: Request, authorization: str | None) -> str:
    """`tenant_id_of` for a route that must not hold a session while it reads its body (an upload): from
    memory for a key verified moments ago (app.api.gate verifies a caller that sends a body), else in one
    brief session under a request slot, given back before the route goes on."""
    remembered = remembered_tenant_id(request, authorization)
    if remembered is not None:
        count_remembered(request, authorization, remembered)
        return remembered
    return await run_in_session(request, _tenant_step, request, authorization)


def recheck_key(session: Session, request: Request, authorization: str | None) -> str:
    """The caller's tenant again, its key's row read afresh (a revocation made by any process is seen; no
    scrypt for the key verified at the start): what a long-poll or an event stream does at least every
    ICLAUDIT_KEY_RECHECK_SECONDS while it waits. 401 once the key is revoked. Counts nothing."""
    if not request.app.state.settings.auth_enabled:
        return str(request.app.state.default_tenant_id)
    found = keys.authenticated_tenant_id(session, _bearer(authorization), max_age=0)
    if found is None:
        raise ApiError(401, "This API key is unknown or revoked.")
    return found


def remembered_tenant_id(request: Request, authorization: str | None) -> str | None:
    """`tenant_id_of`'s answer when it needs neither the database nor I/O (auth off, or a key verified here
    within the memo's TTL, with the limits counted in this process's memory); None when it does. Checks
    and counts nothing: `count_remembered` does, once the caller answers from memory."""
    return remembered_tenant_id_at(request.app.state, authorization)


def remembered_tenant_id_at(state: Any, authorization: str | None, *, on_loop: bool = False) -> str | None:
    """`remembered_tenant_id` from the app's state (app.api.poll has no Request). `on_loop`: the caller
    counts the limits with `count_remembered_async`, so limits shared in Redis do too, for a key that the
    failure throttles would pass at once (`Guard.known_good`: they check nothing)."""
    guard: Guard = state.guard
    if not guard.local and not on_loop:
        return None
    if not state.settings.auth_enabled:
        return state.default_tenant_id  # type: ignore[no-any-return]
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key or not (guard.local or guard.known_good(key)):
        return None
    found = keys.remembered(key)
    if found is None:
        return None
    if found[1] > keys.VERIFIED_TTL_SECONDS / 2:
        _renew_soon(state, key)
    return found[0]


_renewing: set[str] = set()
_renewals: set[asyncio.Task[None]] = set()


def _renew_soon(state: Any, key: str) -> None:
    """Re-read a remembered key's row in the background (one at a time per key) before its memo runs out,
    so a fleet polling with one key never meets an expired memo all at once (each poll would then read the
    row under a request slot). A key revoked elsewhere is still refused within the memo's TTL."""
    if key in _renewing:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # a worker thread: the next poll on the event loop renews it
        return
    _renewing.add(key)
    task = loop.create_task(_renew(state, key))
    _renewals.add(task)
    task.add_done_callback(_renewals.discard)


async def _renew(state: Any, key: str) -> None:
    try:
        async with state.db_slots:
            await to_thread.run_sync(_in_session, state.session_factory, _reread_key, (key,))
    except Exception as exc:  # the memo then runs out and the next poll reads the row itself
        log.warning("renewing a verified key failed (%s)", short_reason(exc))
    finally:
        _renewing.discard(key)


def _reread_key(session: Session, key: str) -> str | None:
    return keys.authenticated_tenant_id(session, key, max_age=0)


def count_remembered(request: Request, authorization: str | None, tenant_id: str) -> None:
    """The checks and counts `tenant_id_of` makes around a successful authentication (429s included), for
    a caller `remembered_tenant_id` recognised."""
    address = request.client.host if request.client else "unknown"
    count_remembered_at(request.app.state, authorization, address, request.method, tenant_id)


def count_remembered_at(
    state: Any, authorization: str | None, address: str, method: str, tenant_id: str
) -> None:
    """`count_remembered` from the app's state and the request's parts (app.api.poll has no Request)."""
    guard: Guard = state.guard
    if state.settings.auth_enabled:
        key = _bearer(authorization)
        parsed = keys.parse_api_key(key)
        guard.before_authentication(key, parsed[0] if parsed else None, address)
        guard.authenticated(key)
    guard.request(tenant_id, method)


async def count_remembered_async(
    state: Any, authorization: str | None, address: str, method: str, tenant_id: str
) -> None:
    """`count_remembered_at` for a caller `remembered_tenant_id_at(on_loop=True)` recognised: limits shared
    in Redis are counted on the event loop (`Guard.request_async`), with no thread."""
    guard: Guard = state.guard
    if guard.local:
        count_remembered_at(state, authorization, address, method, tenant_id)
    else:
        await guard.request_async(tenant_id, method)


def get_tenant(
    request: Request,
    session: SessionDep,
    authorization: Annotated[
        str | None, Header(description="`Bearer ica_…` (from `iclaudit keys create`).")
    ] = None,
) -> Tenant:
    """The caller's tenant (`tenant_id_of`) as its row."""
    tenant = session.get(Tenant, tenant_id_of(request, session, authorization))
    assert tenant is not None  # tenants are never deleted
    return tenant


TenantDep = Annotated[Tenant, Depends(get_tenant)]


PageToken = Annotated[
    str | None,
    Query(
        pattern=PAGE_TOKEN_PATTERN,
        description="A previous page's `next_page_token` (the last shown item's time and id): the page after it.",
    ),
]


RecordsView = Annotated[
    Literal["redacted", "full"],
    Query(
        description="redacted: the records' text with e-mail addresses, phone, card and IBAN numbers and long "
        "digit runs masked, each record named by `record_hash`; full: the text as stored (asked per request, "
        "never the default of a file meant to be shared)."
    ),
]
