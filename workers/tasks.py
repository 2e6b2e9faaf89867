"""Tasks are doorways: the id in, app.jobs.runner.run_audit does the rest."""

from __future__ import annotations

from functools import cache

from sqlalchemy.orm import Session, sessionmaker

from app.config import get_settings
from app.db.engine import make_engine, make_session_factory
from app.jobs.broker import TASK_NAME
from app.jobs.runner import run_audit as run_audit_by_id
from workers.celery_app import celery_app


@cache
def _session_factory() -> sessionmaker[Session]:
    return make_session_factory(make_engine(get_settings().sqlalchemy_url))


@celery_app.task(name=TASK_NAME)
def run_audit(audit_id: str) -> None:
    run_audit_by_id(audit_id, session_factory=_session_factory(), settings=get_settings())
