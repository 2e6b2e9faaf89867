"""What the process holds: one typed container, built by the lifespan (app/main.py) and stored once on
`app.state`; everything reads it through `state_of(app)`."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import anyio
from prometheus_client import CollectorRegistry
from sqlalchemy.orm import Session, sessionmaker
from starlette.applications import Starlette

from app.config import Settings

if TYPE_CHECKING:  # annotations only: these modules read the state through state_of
    from app.api.auth import Authenticator
    from app.api.connections import StreamSlots
    from app.api.limits import Guard
    from app.api.poll import PollCache
    from app.api.watch import AuditWatch
    from app.jobs.executors import Executor
    from app.jobs.plans import CeleryPlanner, InlinePlanner


@dataclass
class AppState:
    """The app's settings, database sessions, executor and the per-process helpers the routes and the
    middleware share. The last four are made on first use, on the event loop, and closed by the lifespan."""

    settings: Settings
    session_factory: sessionmaker[Session]  # requests: one connection per db_slots slot
    jobs_session_factory: sessionmaker[Session]  # the runner, heartbeat and sweep
    db_slots: anyio.Semaphore  # api_concurrency: a request holds a session only while it holds a slot
    guard: Guard  # rate limits and failed-authentication throttles
    authenticator: Authenticator  # who the caller is, for routes and middleware
    executor: Executor
    audit_watch: AuditWatch  # wakes long-polls and /events
    metrics_registry: CollectorRegistry
    default_tenant_id: str | None = None  # the single tenant while authentication is off
    poll_cache: PollCache | None = None  # app/api/poll.py poll_cache_of
    stream_slots: StreamSlots | None = None  # app/api/connections.py stream_slots
    upload_checkers: ProcessPoolExecutor | None = None  # app/api/routes/datasets.py
    uploads_streaming: dict[str, int] = field(default_factory=dict)  # per tenant (datasets.py)
    planner: InlinePlanner | CeleryPlanner | None = None  # app/jobs/plans.py planner


def state_of(app: Starlette) -> AppState:
    """The app's state (set by its lifespan; AttributeError before it ran)."""
    state: AppState = app.state.iclaudit
    return state
