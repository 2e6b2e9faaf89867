"""Annotated dependencies: the settings, a database session, the caller's tenant, the executor."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Annotated

import anyio
from anyio import to_thread
from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from app.api.errors import ApiError
from app.api.limits import Guard
from app.config import Settings
from app.db import keys
from app.db.models import Tenant
from app.db.retry import short_reason
from app.jobs.executors import Executor

log = logging.getLogger(__name__)


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


async def get_session(request: Request) -> AsyncIterator[Session]:
    """A session, while holding one of ICLAUDIT_API_CONCURRENCY slots. Waiting for a slot costs no thread
    and no connection; past ICLAUDIT_API_QUEUE_SECONDS the answer is 503 with Retry-After. The pool has a
    connection per slot, so a request never waits for one while holding a thread (no pool stall)."""
    slots: anyio.Semaphore = request.app.state.db_slots
    acquired = False
    with anyio.move_on_after(request.app.state.settings.api_queue_seconds):
        await slots.acquire()
        acquired = True
    if not acquired:
        raise ApiError(503, "The service is busy; retry in a moment.", headers={"Retry-After": "1"})
    try:
        session = request.app.state.session_factory()
        try:
            yield session
        finally:
            try:
                await to_thread.run_sync(session.close)
            except Exception as exc:  # a connection that died under us: the pool replaces it
                log.warning("session close failed (%s)", short_reason(exc))
    finally:
        slots.release()


def get_executor(request: Request) -> Executor:
    return request.app.state.executor


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]
ExecutorDep = Annotated[Executor, Depends(get_executor)]


def get_tenant(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    authorization: Annotated[
        str | None, Header(description="`Bearer ica_…` (from `iclaudit keys create`).")
    ] = None,
) -> Tenant:
    """The caller's tenant from `Authorization: Bearer <key>`; the single default tenant when auth is off."""
    guard: Guard = request.app.state.guard
    if not settings.auth_enabled:
        tenant = session.get(Tenant, request.app.state.default_tenant_id)
        assert tenant is not None
        guard.request(tenant.id, request.method)
        return tenant
    scheme, _, key = (authorization or "").partition(" ")
    key = key.strip()
    if scheme.lower() != "bearer" or not key:
        raise ApiError(
            401, "Send `Authorization: Bearer <API key>`; `iclaudit keys create --tenant NAME` makes one."
        )
    parsed = keys.parse_api_key(key)
    key_id = parsed[0] if parsed else None
    address = request.client.host if request.client else "unknown"
    guard.before_authentication(key, key_id, address)  # 429 before scrypt once over the failure limits
    tenant = keys.authenticate(session, key)
    if tenant is None:
        guard.authentication_failed(key, key_id, address)
        raise ApiError(401, "This API key is unknown or revoked.")
    guard.authenticated(key)
    guard.request(tenant.id, request.method)  # 429 over ICLAUDIT_RATE_LIMIT / ICLAUDIT_WRITE_RATE_LIMIT
    return tenant


TenantDep = Annotated[Tenant, Depends(get_tenant)]
