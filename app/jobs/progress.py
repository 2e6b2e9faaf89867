"""The runner's ProgressFn: writes `{stage, fraction, eta_seconds, message}` and the heartbeat to the
audit row (at most every `min_interval` seconds, and on every change of stage), and stops the audit
between batches when its cancel flag is set, its deadline passed, its claim was lost or the service stops.

ETA: with a fraction f done after t seconds, eta = t·(1 − f)/f (linear extrapolation; None while f = 0).
"""

from __future__ import annotations

import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from app.audit.runtime import AuditCancelled
from app.db import audits


class ClaimLost(AuditCancelled):
    """Another attempt took this audit over (this one was presumed dead); stop without writing."""


class DeadlineExceeded(AuditCancelled):
    """The audit ran longer than ICLAUDIT_MAX_AUDIT_SECONDS."""


class ServiceStopping(AuditCancelled):
    """The process is shutting down; the audit goes back to PENDING and is re-run later."""


class DbProgress:
    def __init__(
        self,
        *,
        session_factory: sessionmaker[Session],
        audit_id: str,
        attempt: int,
        max_seconds: float,
        stopping: threading.Event | None = None,
        min_interval: float = 0.25,
    ) -> None:
        self._sessions = session_factory
        self._audit_id = audit_id
        self._attempt = attempt
        self._started = time.monotonic()
        self._deadline = self._started + max_seconds
        self._stopping = stopping or threading.Event()
        self._min_interval = min_interval
        self._last_write = float("-inf")
        self._last_stage: str | None = None
        self.cancelled = threading.Event()  # also set by the heartbeat thread
        self.claim_lost = threading.Event()

    def eta_seconds(self, fraction: float) -> float | None:
        if fraction <= 0.0:
            return None
        elapsed = time.monotonic() - self._started
        return elapsed * (1.0 - fraction) / fraction

    def __call__(self, stage: str, fraction: float, message: str = "") -> None:
        now = time.monotonic()
        if self._stopping.is_set():
            raise ServiceStopping("the service is stopping")
        if now > self._deadline:
            raise DeadlineExceeded("the audit ran longer than ICLAUDIT_MAX_AUDIT_SECONDS")
        if self.claim_lost.is_set():
            raise ClaimLost(self._audit_id)
        if self.cancelled.is_set():
            raise AuditCancelled(self._audit_id)
        if stage == self._last_stage and now - self._last_write < self._min_interval:
            return
        fraction = min(max(float(fraction), 0.0), 1.0)
        with self._sessions.begin() as session:
            held = audits.record_progress(
                session,
                audit_id=self._audit_id,
                attempt=self._attempt,
                stage=stage,
                fraction=fraction,
                eta_seconds=self.eta_seconds(fraction),
                message=message,
            )
            cancel = audits.cancel_requested(session, audit_id=self._audit_id)
        self._last_write, self._last_stage = now, stage
        if not held:
            self.claim_lost.set()
            raise ClaimLost(self._audit_id)
        if cancel:
            self.cancelled.set()
            raise AuditCancelled(self._audit_id)


class Heartbeat:
    """A daemon thread proving the attempt alive every `interval` seconds, even while a kind computes
    without reporting progress (model loading); it also notices a cancel flag or a lost claim."""

    def __init__(
        self,
        *,
        session_factory: sessionmaker[Session],
        audit_id: str,
        attempt: int,
        interval: float,
        progress: DbProgress,
    ) -> None:
        self._sessions = session_factory
        self._audit_id = audit_id
        self._attempt = attempt
        self._interval = interval
        self._progress = progress
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"heartbeat-{audit_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._done.wait(self._interval):
            with self._sessions.begin() as session:
                if not audits.heartbeat(session, audit_id=self._audit_id, attempt=self._attempt):
                    self._progress.claim_lost.set()
                    return
                if audits.cancel_requested(session, audit_id=self._audit_id):
                    self._progress.cancelled.set()
