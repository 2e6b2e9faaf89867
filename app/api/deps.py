"""Annotated dependencies: the settings, a database session, the caller's tenant, the executor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.orm import Session

from app.api.errors import ApiError
from app.config import Settings
from app.db import keys
from app.db.models import Tenant
from app.jobs.executors import Executor


def get_settings_dep(request: Request) -> Settings:
    return request.app.state.settings


def get_session(request: Request) -> Iterator[Session]:
    with request.app.state.session_factory() as session:
        yield session


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
    if not settings.auth_enabled:
        tenant = session.get(Tenant, request.app.state.default_tenant_id)
        assert tenant is not None
        return tenant
    scheme, _, key = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(
            401, "Send `Authorization: Bearer <API key>`; `iclaudit keys create --tenant NAME` makes one."
        )
    tenant = keys.authenticate(session, key.strip())
    if tenant is None:
        raise ApiError(401, "This API key is unknown or revoked.")
    return tenant


TenantDep = Annotated[Tenant, Depends(get_tenant)]
