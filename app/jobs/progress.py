"""The runner's ProgressFn and the heartbeat, which together hold an attempt's lease on its audit.

`DbProgress` writes `{stage, fraction, eta_seconds, message}` and the heartbeat to the audit row (at most
every `min_interval` seconds, and on every change of stage), and stops the audit between batches when its
cancel flag is set, its deadline passed, its claim was lost or the service stops.

The lease: the sweep and other workers presume an attempt dead once its heartbeat is older than
ICLAUDIT_STALE_AFTER_SECONDS (the stale window), and may then claim the audit. So an attempt computes only
while its last successful heartbeat (or progress write) is younger than `lease_seconds`, a margin inside the
stale window. A database outage fails writes (they are skipped: progress is best effort) but never the
audit; once the lease runs out, the next progress call *waits* until a heartbeat gets through again —
proving no one else claimed the audit — or the claim turns out lost (another attempt took over, so this one
stops). Two attempts therefore never compute at once.

ETA: with a fraction f done after t seconds, eta = t·(1 − f)/f (linear extrapolation; None while f = 0).
"""

from __future__ import annotations

import logging
import threading
import time

from sqlalchemy.orm import Session, sessionmaker

from app.audit.runtime import AuditCancelled
from app.db import audits
from app.db.retry import is_transient, short_reason

log = logging.getLogger(__name__)


class ClaimLost(AuditCancelled):
    """Another attempt took this audit over (this one was presumed dead); stop without writing."""


class DeadlineExceeded(AuditCancelled):
    """The audit ran longer than ICLAUDIT_MAX_AUDIT_SECONDS."""


class ServiceStopping(AuditCancelled):
    """The process is shutting down; the audit goes back to PENDING and is re-run later."""


def lease_seconds(*, stale_after_seconds: float, heartbeat_seconds: float) -> float:
    """How long an attempt may compute after its last successful heartbeat: the stale window less two
    heartbeats of margin, and at least half of it (always strictly inside the window)."""
    return max(stale_after_seconds - 2 * heartbeat_seconds, stale_after_seconds / 2)


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
        lease: float = float("inf"),
    ) -> None:
        self._sessions = session_factory
        self._audit_id = audit_id
        self._attempt = attempt
        self._started = time.monotonic()
        self._deadline = self._started + max_seconds
        self._stopping = stopping or threading.Event()
        self._min_interval = min_interval
        self._lease = lease
        self._last_write = float("-inf")
        self._last_stage: str | None = None
        self._renewed = self._started  # the claim itself wrote the first heartbeat
        self._renewed_lock = threading.Lock()
        self.cancelled = threading.Event()  # also set by the heartbeat thread
        self.claim_lost = threading.Event()

    def renewed(self, at: float) -> None:
        """A heartbeat sent at monotonic time `at` got through: the lease runs from there."""
        with self._renewed_lock:
            self._renewed = max(self._renewed, at)

    def lease_left(self) -> float:
        with self._renewed_lock:
            return self._renewed + self._lease - time.monotonic()

    def eta_seconds(self, fraction: float) -> float | None:
        if fraction <= 0.0:
            return None
        elapsed = time.monotonic() - self._started
        return elapsed * (1.0 - fraction) / fraction

    def check(self) -> None:
        """Raise if the attempt must stop; wait while its lease is unconfirmed."""
        while True:
            if self._stopping.is_set():
                raise ServiceStopping("the service is stopping")
            if time.monotonic() > self._deadline:
                raise DeadlineExceeded("the audit ran longer than ICLAUDIT_MAX_AUDIT_SECONDS")
            if self.claim_lost.is_set():
                raise ClaimLost(self._audit_id)
            if self.cancelled.is_set():
                raise AuditCancelled(self._audit_id)
            if self.lease_left() > 0:
                return
            log.warning("audit %s attempt %d: lease unconfirmed, paused", self._audit_id, self._attempt)
            self._stopping.wait(0.1)

    def __call__(self, stage: str, fraction: float, message: str = "") -> None:
        self.check()
        now = time.monotonic()
        if stage == self._last_stage and now - self._last_write < self._min_interval:
            return
        fraction = min(max(float(fraction), 0.0), 1.0)
        try:
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
        except Exception as exc:
            if not is_transient(exc):
                raise
            # best effort: the heartbeat keeps trying, the lease decides whether computing may go on
            log.warning("audit %s: progress not written (%s)", self._audit_id, short_reason(exc))
            self._last_write, self._last_stage = now, stage
            return
        self._last_write, self._last_stage = now, stage
        if not held:
            self.claim_lost.set()
            raise ClaimLost(self._audit_id)
        self.renewed(now)
        if cancel:
            self.cancelled.set()
            raise AuditCancelled(self._audit_id)


class Heartbeat:
    """A daemon thread proving the attempt alive every `interval` seconds, even while a kind computes
    without reporting progress (model loading); it also notices a cancel flag or a lost claim. A database
    error never ends it: it logs and tries again (every `interval`, at most 0.5 s apart while failing)."""

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

    def beat(self) -> bool:
        """One heartbeat; False when the claim is lost. Raises what the database raised."""
        sent = time.monotonic()
        with self._sessions.begin() as session:
            held = audits.heartbeat(session, audit_id=self._audit_id, attempt=self._attempt)
            cancel = held and audits.cancel_requested(session, audit_id=self._audit_id)
        if not held:
            return False
        self._progress.renewed(sent)
        if cancel:
            self._progress.cancelled.set()
        return True

    def _loop(self) -> None:
        failing_since: float | None = None
        while not self._done.wait(self._interval if failing_since is None else min(self._interval, 0.5)):
            try:
                held = self.beat()
            except Exception as exc:
                if failing_since is None:
                    failing_since = time.monotonic()
                    log.warning(
                        "audit %s attempt %d: heartbeat failed (%s); retrying",
                        self._audit_id,
                        self._attempt,
                        short_reason(exc),
                        exc_info=not is_transient(exc),
                    )
                continue
            if failing_since is not None:
                log.info(
                    "audit %s attempt %d: heartbeat back after %.1f s",
                    self._audit_id,
                    self._attempt,
                    time.monotonic() - failing_since,
                )
                failing_since = None
            if not held:
                self._progress.claim_lost.set()
                return
