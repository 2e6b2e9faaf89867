"""create_app(): routers, error handlers, and the lifespan that opens the database, starts the executor
and the sweep, and (auth off) makes the single default tenant."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from anyio import to_thread
from fastapi import Depends, FastAPI
from prometheus_client import CollectorRegistry

from app.api import metrics
from app.api.auth import Authenticator
from app.api.deps import get_tenant
from app.api.handlers import EXCEPTION_HANDLERS
from app.api.limits import Guard
from app.api.middleware import stack
from app.api.openapi import document_error_responses, install_openapi, operation_id
from app.api.poll import close_poll_cache
from app.api.routes import (
    accounting,
    audits,
    datasets,
    health,
    mlflow,
    models,
    records,
    schedules,
    sweeps,
    webhooks,
)
from app.api.state import AppState
from app.api.watch import AuditWatch
from app.config import Settings, get_settings
from app.db import keys
from app.db.engine import make_engine, make_session_factory
from app.db.migrate import require_head
from app.integrations.dispatch import IntegrationsTicker
from app.jobs.executors import make_executor
from app.jobs.plans import close_planner
from app.jobs.sweeper import Sweeper
from app.secrets import SCRUBBER
from app.ui.routes import install_ui

log = logging.getLogger("iclaudit")

DEFAULT_TENANT = "default"


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    SCRUBBER.add_environment()  # the operator's secrets never leave in a log line, row or webhook body

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Requests and jobs (runner, heartbeat, sweep) never share a pool. A request holds a session only
        # while it holds one of api_concurrency slots (app/api/deps.py), and the pool has a connection for
        # each slot, so no thread ever waits for a connection; the rest wait for a slot, on the event loop.
        engine = make_engine(
            settings.sqlalchemy_url,
            pool_size=settings.api_concurrency,
            max_overflow=4,
            pool_timeout=settings.api_queue_seconds,
            connect_retry_seconds=1.0,
            name="iclaudit-api",
        )
        require_head(engine)
        session_factory = make_session_factory(engine)
        jobs_engine = make_engine(
            settings.sqlalchemy_url,
            pool_size=2 * settings.inline_workers + 2 if settings.executor == "inline" else 2,
            max_overflow=4,
            connect_retry_seconds=5.0,
            name="iclaudit-jobs",
        )
        jobs_session_factory = make_session_factory(jobs_engine)
        db_slots = anyio.Semaphore(settings.api_concurrency)
        to_thread.current_default_thread_limiter().total_tokens = settings.api_concurrency + 8
        default_tenant_id = None
        if not settings.auth_enabled:
            with session_factory.begin() as session:
                default_tenant_id = keys.get_or_create_tenant(session, DEFAULT_TENANT).id
            log.warning(
                "AUTHENTICATION IS OFF (ICLAUDIT_AUTH_ENABLED=false): every caller is tenant %r. "
                "Never expose this server beyond localhost.",
                DEFAULT_TENANT,
            )
        # before any thread starts: the sweeper's first import of redis (through celery) must not race
        # the limits library's import check, which reads a half-imported module as version 0.0.0
        guard = Guard.from_settings(settings)  # rate limits and failed-authentication throttles
        executor = make_executor(settings=settings, session_factory=jobs_session_factory)
        sweeper = Sweeper(session_factory=jobs_session_factory, executor=executor, settings=settings)
        sweeper.start()
        # webhook events and deliveries, schedules (app/integrations/dispatch.py)
        integrations = IntegrationsTicker(sessions=jobs_session_factory, settings=settings, executor=executor)
        integrations.start()
        watch = AuditWatch(jobs_session_factory)  # wakes long-polls, /events
        state = AppState(
            settings=settings,
            session_factory=session_factory,
            jobs_session_factory=jobs_session_factory,
            db_slots=db_slots,
            guard=guard,
            authenticator=Authenticator(  # who the caller is, for routes and middleware
                guard=guard,
                default_tenant_id=default_tenant_id,
                session_factory=session_factory,
                db_slots=db_slots,
            ),
            executor=executor,
            audit_watch=watch,
            metrics_registry=registry,
            default_tenant_id=default_tenant_id,
        )
        app.state.iclaudit = state  # the one attribute: read through app.api.state.state_of
        await watch.start()
        if hasattr(executor, "on_write"):  # the inline executor's worker processes commit out of our sight
            executor.on_write = watch.wake_threadsafe
        log.info("iclaudit ready: database %s, executor %s", engine.url.render_as_string(), settings.executor)
        try:
            yield
        finally:
            await watch.stop()
            await close_poll_cache(app)
            datasets.close_checking_pool(app)  # the upload-checking processes, if any started
            close_planner(state)  # the plan process, if a plan started it (app/jobs/plans.py)
            integrations.stop()
            sweeper.stop()
            executor.close()
            jobs_engine.dispose()
            engine.dispose()

    registry = CollectorRegistry()  # this app's metrics (app/api/metrics.py)
    app = FastAPI(
        title="iclaudit",
        version="0.1.0",
        summary="Audit privacy leakage of in-context learning and whether DP-ICL keeps its claimed ε.",
        lifespan=lifespan,
        docs_url=None,  # /docs and /redoc come from app.ui, on vendored assets (no CDN)
        redoc_url=None,
        generate_unique_id_function=operation_id,  # submitAudit, getAudit, … (app/api/openapi.py)
        middleware=stack(settings, registry),  # outer to inner (app/api/middleware/__init__.py)
        exception_handlers=EXCEPTION_HANDLERS,  # app/api/handlers.py
    )
    metrics.install_metrics(app, registry)  # the database's audit figures beside the HTTP ones
    app.include_router(health.router)
    app.include_router(audits.router)
    app.include_router(records.router)  # /v1/audits/{id}/records
    app.include_router(datasets.router)
    app.include_router(sweeps.router)
    app.include_router(webhooks.router)
    app.include_router(mlflow.router)
    app.include_router(schedules.router)
    # Every /v1 resource needs a caller; the calculators too, so a public deployment is not a free CPU.
    app.include_router(models.router, dependencies=[Depends(get_tenant)])
    app.include_router(accounting.router, dependencies=[Depends(get_tenant)])
    app.include_router(metrics.router)
    install_ui(app)
    install_openapi(app)  # the bearer scheme and example results in the document
    document_error_responses(app)  # every operation's error answers in the document (last: wraps the rest)
    return app
