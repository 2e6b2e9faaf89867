"""Annotated dependencies: the settings, a database session, the caller's tenant, the executor."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import Depends, Header, Query, Request
from sqlalchemy.orm import Session

from app.api.auth import Credentials, authenticator_of
from app.api.sessions import get_session
from app.api.state import state_of
from app.config import Settings
from app.db.models import Tenant
from app.db.scoping import PAGE_TOKEN_PATTERN
from app.jobs.executors import Executor


def get_settings_dep(request: Request) -> Settings:
    return state_of(request.app).settings


def get_executor(request: Request) -> Executor:
    return state_of(request.app).executor


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
SessionDep = Annotated[Session, Depends(get_session)]
ExecutorDep = Annotated[Executor, Depends(get_executor)]


def get_tenant(
    request: Request,
    session: SessionDep,
    authorization: Annotated[
        str | None, Header(description="`Bearer ica_…` (from `iclaudit keys create`).")
    ] = None,
) -> Tenant:
    """The caller's tenant (app.api.auth.Authenticator.tenant: checked, and counted) as its row."""
    tenant_id = authenticator_of(request.app).tenant(session, Credentials.of(request, authorization))
    tenant = session.get(Tenant, tenant_id)
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
