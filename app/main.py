"""create_app(): routers, error handlers, and the lifespan that opens the database, starts the executor
and the sweep, and (auth off) makes the single default tenant."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from app.api import accounting, audits, datasets, health, metrics, models
from app.api.deps import get_tenant
from app.api.errors import install_error_handlers
from app.api.watch import AuditWatch
from app.config import Settings, get_settings
from app.db import keys
from app.db.engine import make_engine, make_session_factory
from app.db.migrate import require_head
from app.jobs.executors import Sweeper, make_executor
from app.jobs.providers import preload_in_background
from app.ui.routes import install_ui

log = logging.getLogger("iclaudit")

DEFAULT_TENANT = "default"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = make_engine(settings.sqlalchemy_url)
        require_head(engine)
        session_factory = make_session_factory(engine)
        app.state.settings = settings
        app.state.session_factory = session_factory
        if not settings.auth_enabled:
            with session_factory.begin() as session:
                app.state.default_tenant_id = keys.get_or_create_tenant(session, DEFAULT_TENANT).id
            log.warning(
                "AUTHENTICATION IS OFF (ICLAUDIT_AUTH_ENABLED=false): every caller is tenant %r. "
                "Never expose this server beyond localhost.",
                DEFAULT_TENANT,
            )
        executor = make_executor(settings=settings, session_factory=session_factory)
        app.state.executor = executor
        sweeper = Sweeper(session_factory=session_factory, executor=executor, settings=settings)
        sweeper.start()
        if settings.executor == "inline" and settings.preload_models:
            preload_in_background(settings.default_model)  # as a worker does at start-up
        app.state.audit_watch = watch = AuditWatch(session_factory)  # wakes long-polls and /events
        await watch.start()
        log.info("iclaudit ready: database %s, executor %s", engine.url.render_as_string(), settings.executor)
        try:
            yield
        finally:
            await watch.stop()
            sweeper.stop()
            executor.close()
            engine.dispose()

    app = FastAPI(
        title="iclaudit",
        version="0.1.0",
        summary="Audit privacy leakage of in-context learning and whether DP-ICL keeps its claimed ε.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from app.ui, on vendored assets (no CDN)
        redoc_url=None,
    )
    install_error_handlers(app)
    app.include_router(health.router)
    app.include_router(audits.router)
    app.include_router(datasets.router)
    # Every /v1 resource needs a caller; the calculators too, so a public deployment is not a free CPU.
    app.include_router(models.router, dependencies=[Depends(get_tenant)])
    app.include_router(accounting.router, dependencies=[Depends(get_tenant)])
    app.include_router(metrics.router)
    install_ui(app)
    return app
