"""The sweep: re-enqueue every audit whose message is lost — PENDING audits never enqueued or enqueued into
another queue epoch, and RUNNING ones whose heartbeat went stale (their worker died) and were not re-enqueued
since — so a backlog waiting in a live queue is never duplicated. The API process runs it at start-up and
every ICLAUDIT_SWEEP_SECONDS. Re-enqueueing is safe: the runner's claim lets only one attempt run."""

from __future__ import annotations

import logging
import threading

from sqlalchemy.orm import Session, sessionmaker

from app.config import Settings
from app.db import audits
from app.db.models import utcnow
from app.db.retry import in_transaction, is_transient, short_reason
from app.jobs.executors import Executor, send
from app.jobs.release import SENDING

log = logging.getLogger(__name__)


def requeue(
    *,
    session_factory: sessionmaker[Session],
    executor: Executor,
    stale_after_seconds: float,
    retry_seconds: float = 10.0,
) -> list[str]:
    """One sweep: enqueue every audit whose message is lost (`audits.cancel_stale_and_list_lost`), holding
    app.jobs.release.SENDING so that the releaser does not send the same audits meanwhile."""
    with SENDING:
        return _requeue(session_factory, executor, stale_after_seconds, retry_seconds)


def _requeue(
    session_factory: sessionmaker[Session],
    executor: Executor,
    stale_after_seconds: float,
    retry_seconds: float,
) -> list[str]:
    epoch = executor.epoch()

    def lost(session: Session) -> list[str]:
        stale_before = audits.stale_cutoff(stale_after_seconds)
        lost_ids = audits.cancel_stale_and_list_lost(session, stale_before=stale_before, queue_epoch=epoch)
        return executor.admit(session, lost_ids, epoch)

    ids = in_transaction(session_factory, lost, max_seconds=retry_seconds, what="sweep")
    sent_at = utcnow()
    sent = send(executor, ids)
    in_transaction(
        session_factory,
        lambda session: audits.mark_enqueued(session, sent, queue_epoch=epoch, sent_at=sent_at),
        max_seconds=retry_seconds,
        what="sweep: mark enqueued",
    )
    if sent:
        log.info("sweep re-enqueued %d audit(s): %s", len(sent), ", ".join(sent))
    return sent


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
            except Exception as exc:
                log.warning(
                    "sweep failed (%s); retrying in %.0f s",
                    short_reason(exc),
                    self._settings.sweep_seconds,
                    exc_info=not is_transient(exc),
                )
            if self._done.wait(self._settings.sweep_seconds):
                return
