"""Where audits run: `inline` (a pool of worker processes fed by the API process, the embedded default) or `celery`
(a task carrying only the audit id, picked up by `iclaudit worker`). Both end in app.jobs.runner.run_audit.

Every executor has a queue epoch, a name for the incarnation of its queue: a fresh id per inline process,
and for Celery a key kept in the broker's Redis (`iclaudit:queue-epoch`; a broker restarted empty has a new
one). `enqueue` records the epoch on each audit it sends; the sweep (app/jobs/sweeper.py) re-enqueues what
is lost.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from app import observability
from app.config import Settings
from app.db import audits
from app.db.models import Audit, AuditState, utcnow
from app.db.retry import short_reason
from app.jobs.broker import TASK_NAME
from app.jobs.fair_queue import FairQueue
from app.jobs.pool import WorkerProcess, context
from app.jobs.writes import WriteCounts

log = logging.getLogger(__name__)


EPOCH_KEY = "iclaudit:queue-epoch"


class Executor(Protocol):
    def epoch(self) -> str:
        """The current incarnation of the queue (raises while the broker is unreachable)."""
        ...

    def submit(self, audit_id: str) -> None: ...

    def admit(self, session: Session, audit_ids: Sequence[str], epoch: str) -> list[str]:
        """Those of `audit_ids` to send now (the others stay PENDING, held for a later turn)."""
        ...

    def close(self) -> None: ...


class InlineExecutor:
    """`inline_workers` worker processes (app/jobs/pool.py), each running one audit at a time with its models
    loaded once, fed from a `FairQueue` in this process: a slot hands the next audit (the tenant served
    least recently first) to its process only when that process is idle, so one tenant's backlog does not
    hold up another tenant's audit, and a long audit holds one process while the others take the rest. A
    process is started at the first audit it gets (all at once when models are preloaded) and again after
    it died. On close, running audits stop at their next progress call and go back to PENDING (re-run at
    the next start)."""

    def __init__(self, *, session_factory: sessionmaker[Session], settings: Settings) -> None:
        self._sessions = session_factory
        self._settings = settings
        self._stopping = threading.Event()
        self._process_stopping = context().Event()  # the worker processes' view of `_stopping`
        self._queue = FairQueue()
        self.on_write: Callable[[], None] | None = None
        """Called (from a reader thread) on every commit in a worker process: the API's long-poll hub."""
        # app.jobs.writes: slot 0 this process's writes, 1 + i worker process i's (app.api.fast_poll's stamps)
        self.writes = WriteCounts(1 + settings.inline_workers, ctx=context())
        self._unlisten = self.writes.listen(0)
        self._running: dict[str, int] = {}  # audit id → the index of the process running it
        self._handovers = 0  # audits handed to a process or back from one, so far
        self._handover_lock = threading.Lock()
        self._processes: list[WorkerProcess | None] = [None] * settings.inline_workers
        self._slots = [
            threading.Thread(target=self._work, args=(i,), name=f"audit-slot-{i}", daemon=True)
            for i in range(settings.inline_workers)
        ]
        for slot in self._slots:
            slot.start()
        self._epoch = f"inline-{uuid.uuid4().hex}"

    def epoch(self) -> str:
        return self._epoch

    def write_stamp(self, audit_id: str) -> tuple[int, int, int, int] | None:
        """What an audit's kept answer depends on: the hand-overs, this process's writes and those of the
        process running the audit (if any); None while one of those writes is in flight."""
        handovers = self._handovers
        index = self._running.get(audit_id, -1)
        here = self.writes.stamp(0)
        there = self.writes.stamp(1 + index) if index >= 0 else 0
        if here is None or there is None:
            return None
        return handovers, index, here, there

    def _handover(self, audit_id: str, index: int | None) -> None:
        with self._handover_lock:
            self._handovers += 1
            if index is None:
                self._running.pop(audit_id, None)
            else:
                self._running[audit_id] = index

    def _tenant_of(self, audit_id: str) -> str:
        """The audit's tenant, for its turn in the queue ("" if it cannot be read now: a shared turn)."""
        try:
            with self._sessions() as session:
                return audits.tenant_of(session, audit_id=audit_id) or ""
        except Exception as exc:
            log.warning("audit %s: tenant unknown for its queue turn (%s)", audit_id, short_reason(exc))
            return ""

    def submit(self, audit_id: str) -> None:
        # the submitting request's id goes with it, for the audit's log lines
        self._queue.put(self._tenant_of(audit_id), (observability.request_id.get(), audit_id))

    def admit(self, session: Session, audit_ids: Sequence[str], epoch: str) -> list[str]:
        return list(audit_ids)  # the FairQueue takes turns itself

    def _process(self, index: int) -> WorkerProcess:
        """Slot `index`'s worker process, started (again) if it is not running."""
        process = self._processes[index]
        if process is None or not process.alive:
            if process is not None:
                process.stop(timeout=0)
                self.writes.reset(1 + index)  # it may have died with a write counted as in flight
            process = WorkerProcess(
                settings=self._settings,
                stopping=self._process_stopping,
                name=f"iclaudit-audits-{index}",
                on_write=self._wrote,
                writes=self.writes.counts,
                slot=1 + index,
            )
            self._processes[index] = process
        return process

    def _wrote(self) -> None:
        if self.on_write is not None:
            self.on_write()

    def _work(self, index: int) -> None:
        if self._settings.preload_models:  # load the default model in every process at start-up
            self._process(index)
        while (item := self._queue.get(self._stopping)) is not None:
            request_id, audit_id = item
            process = self._process(index)
            self._handover(audit_id, index)
            try:
                ran = process.run(audit_id, request_id)
            finally:
                self._handover(audit_id, None)
            if ran:
                self._send_follow_up(audit_id)
            if not ran:
                log.error(
                    "audit process %s died (exit code %s) running audit %s; started again, and the sweep "
                    "re-runs the audit once its heartbeat is stale",
                    process.process.name,
                    process.process.exitcode,
                    audit_id,
                )
                self._requeue_unclaimed(audit_id)

    def _send_follow_up(self, audit_id: str) -> None:
        """The next step the audit's outcome stored as a new audit (`until_answer`: app/jobs/follow_up.py),
        queued now rather than at the next sweep."""
        try:
            with self._sessions() as session:
                done = session.get(Audit, audit_id)
                follow_up = session.get(Audit, done.followed_by) if done and done.followed_by else None
                if follow_up is not None and follow_up.state == AuditState.PENDING:
                    enqueue(session, self, [follow_up.id])
                    session.commit()
        except Exception as exc:
            log.warning(
                "audit %s: its next step not queued (%s); the sweep will", audit_id, short_reason(exc)
            )

    def _requeue_unclaimed(self, audit_id: str) -> None:
        """An audit whose process died before claiming it is still PENDING in this queue's epoch, which
        the sweep leaves alone: queue it again (a claimed one is the sweep's, once its heartbeat is stale)."""
        try:
            with self._sessions() as session:
                pending = session.get(Audit, audit_id)
                if pending is not None and pending.state == AuditState.PENDING:
                    self.submit(audit_id)
        except Exception as exc:
            log.warning("audit %s: not queued again (%s); the sweep will", audit_id, short_reason(exc))

    def close(self) -> None:
        self._stopping.set()
        self._unlisten()
        if self._process_stopping is not None:
            self._process_stopping.set()
        self._queue.wake_all()
        for slot in self._slots:  # each ends once its process reports its audit released (or dies)
            slot.join()
        for process in self._processes:
            if process is not None:
                process.stop(timeout=self._settings.db_retry_seconds + 10)
        # drop the shared event's semaphores now, not at exit (where the resource tracker warns of them)
        self._processes = [None] * len(self._processes)
        self._process_stopping = None  # type: ignore[assignment]


class CeleryExecutor:
    """Sends `iclaudit.run_audit(audit_id)` to the broker; the worker re-reads the row. At most
    ICLAUDIT_CELERY_TENANT_AUDITS audits of a tenant are in the broker at once; the rest wait in the
    database and a `Releaser` thread sends them as those finish (app/jobs/release.py)."""

    def __init__(self, *, settings: Settings, session_factory: sessionmaker[Session]) -> None:
        from app.jobs.broker import create_celery
        from app.jobs.release import Releaser

        self._celery = create_celery(settings)
        self._broker_url = settings.required_broker_url
        self._per_tenant = settings.celery_tenant_audits
        self._releaser = Releaser(
            session_factory=session_factory,
            epoch=self.epoch,
            send=lambda ids: send(self, ids),
            per_tenant=self._per_tenant,
        )
        self._releaser.start()

    def admit(self, session: Session, audit_ids: Sequence[str], epoch: str) -> list[str]:
        from app.jobs.release import admit

        return admit(session, audit_ids, epoch=epoch, per_tenant=self._per_tenant)

    def epoch(self) -> str:
        import redis

        client = redis.Redis.from_url(self._broker_url, socket_timeout=2, socket_connect_timeout=2)
        try:
            client.set(EPOCH_KEY, uuid.uuid4().hex, nx=True)
            return client.get(EPOCH_KEY).decode()  # type: ignore[union-attr]
        finally:
            client.close()

    def submit(self, audit_id: str) -> None:
        request_id = observability.request_id.get()
        self._celery.send_task(
            TASK_NAME, args=[audit_id], kwargs={"request_id": request_id} if request_id else {}
        )

    def close(self) -> None:
        self._releaser.stop()
        self._celery.close()


def make_executor(*, settings: Settings, session_factory: sessionmaker[Session]) -> Executor:
    if settings.executor == "celery":
        if not settings.broker_url:
            raise ValueError("ICLAUDIT_EXECUTOR=celery needs ICLAUDIT_BROKER_URL")
        return CeleryExecutor(settings=settings, session_factory=session_factory)
    return InlineExecutor(session_factory=session_factory, settings=settings)


def send(executor: Executor, audit_ids: Sequence[str]) -> list[str]:
    """Submit each audit to the executor; the ids sent (one that fails is left for the sweep)."""
    sent = []
    for audit_id in audit_ids:
        try:
            executor.submit(audit_id)
        except Exception:
            log.exception("could not enqueue audit %s; the sweep will retry", audit_id)
            continue
        sent.append(audit_id)
    return sent


def enqueue(session: Session, executor: Executor, audit_ids: Sequence[str]) -> list[str]:
    """Send each audit's message (those the executor admits now: the others are held for their turn) and
    record the queue epoch that holds it (the caller commits). A send that fails leaves the audit
    unmarked, for the sweep. Returns the ids sent. The epoch is read before
    sending: if the queue restarts in between, the audit is at worst sent twice, never lost."""
    try:
        epoch = executor.epoch()
    except Exception as exc:
        log.warning("queue unreachable (%s); the sweep will enqueue %d audit(s)", exc, len(audit_ids))
        return []
    sent_at = utcnow()
    sent = send(executor, executor.admit(session, audit_ids, epoch))
    audits.mark_enqueued(session, sent, queue_epoch=epoch, sent_at=sent_at)
    return sent
