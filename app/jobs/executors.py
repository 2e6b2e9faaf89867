"""Where audits run: `inline` (a thread pool inside the API process, the embedded default) or `celery`
(a task carrying only the audit id, picked up by `iclaudit worker`). Both end in app.jobs.runner.run_audit.

The sweep (`requeue`) re-enqueues PENDING audits that were never (or long ago) enqueued and RUNNING ones
whose heartbeat went stale (their worker died); the API process runs it at start-up and every
ICLAUDIT_SWEEP_SECONDS. Re-enqueueing is safe: the runner's claim lets only one attempt run.
"""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import audits
from app.jobs.broker import TASK_NAME

log = logging.getLogger(__name__)


class Executor(Protocol):
    def submit(self, audit_id: str) -> None: ...

    def close(self) -> None: ...


class InlineExecutor:
    """Threads in this process; on close, running audits stop at their next progress call and go back to
    PENDING (re-run at the next start)."""

    def __init__(self, *, session_factory: sessionmaker[Session], settings: Settings) -> None:
        self._sessions = session_factory
        self._settings = settings
        self._stopping = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=settings.inline_workers, thread_name_prefix="audit")

    def submit(self, audit_id: str) -> None:
        from app.jobs.runner import run_audit

        self._pool.submit(
            run_audit,
            audit_id,
            session_factory=self._sessions,
            settings=self._settings,
            stopping=self._stopping,
        )

    def close(self) -> None:
        self._stopping.set()
        self._pool.shutdown(wait=True, cancel_futures=True)


class CeleryExecutor:
    """Sends `iclaudit.run_audit(audit_id)` to the broker; the worker re-reads the row."""

    def __init__(self, *, settings: Settings) -> None:
        from app.jobs.broker import create_celery

        self._celery = create_celery(settings)

    def submit(self, audit_id: str) -> None:
        self._celery.send_task(TASK_NAME, args=[audit_id])

    def close(self) -> None:
        self._celery.close()


def make_executor(*, settings: Settings, session_factory: sessionmaker[Session]) -> Executor:
    if settings.executor == "celery":
        if not settings.broker_url:
            raise ValueError("ICLAUDIT_EXECUTOR=celery needs ICLAUDIT_BROKER_URL")
        return CeleryExecutor(settings=settings)
    return InlineExecutor(session_factory=session_factory, settings=settings)


def requeue(
    *, session_factory: sessionmaker[Session], executor: Executor, stale_after_seconds: float
) -> list[str]:
    """One sweep: enqueue every PENDING/stale-RUNNING audit not enqueued within `stale_after_seconds`."""
    with session_factory.begin() as session:
        ids = audits.cancel_stale_and_list_lost(
            session, stale_before=audits.stale_cutoff(stale_after_seconds)
        )
    for audit_id in ids:
        executor.submit(audit_id)
        with session_factory.begin() as session:
            audits.mark_enqueued(session, [audit_id])
    if ids:
        log.info("sweep re-enqueued %d audit(s): %s", len(ids), ", ".join(ids))
    return ids


class Sweeper:
    """A daemon thread running `requeue` every `interval` seconds (first run at once)."""

    def __init__(
        self, *, session_factory: sessionmaker[Session], executor: Executor, settings: Settings
    ) -> None:
        self._sessions = session_factory
        self._executor = executor
        self._settings = settings
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="sweeper", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        while True:
            try:
                requeue(
                    session_factory=self._sessions,
                    executor=self._executor,
                    stale_after_seconds=self._settings.stale_after_seconds,
                )
            except Exception:
                log.exception("sweep failed; retrying in %.0f s", self._settings.sweep_seconds)
            if self._done.wait(self._settings.sweep_seconds):
                return
