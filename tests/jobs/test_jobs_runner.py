"""The runner, its progress callback and the sweep, on both dialects, with real kinds."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import update

from app.audit.kinds.registry import kind_module
from app.audit.runtime import AuditCancelled, RunContext
from app.config import Settings
from app.db import audits, keys
from app.db.engine import make_engine, make_session_factory
from app.db.models import Audit, AuditState, utcnow
from app.jobs.executors import InlineExecutor
from app.jobs.progress import ClaimLost, DbProgress, DeadlineExceeded, Heartbeat
from app.jobs.runner import run_audit
from app.main import create_app
from testkit.client import bound_request, long_mia_request, wait_for
from testkit.held_endpoint import HeldEndpoint


@pytest.fixture
def db(database_url: str, tmp_path: Path, data_dir: Path):
    engine = make_engine(database_url)
    sessions = make_session_factory(engine)
    settings = Settings(
        database_url=database_url,
        state_dir=tmp_path,
        data_dir=data_dir,
        heartbeat_seconds=0.2,
        stale_after_seconds=2,
        sweep_seconds=0.5,
        auth_enabled=False,
        preload_models=False,
    )
    with sessions.begin() as s:
        tenant_id = keys.get_or_create_tenant(s, "default").id
    yield sessions, settings, tenant_id
    engine.dispose()


def _add(sessions, tenant_id: str, request: dict) -> str:
    with sessions.begin() as s:
        return audits.add_audit(s, tenant_id=tenant_id, kind=request["kind"], request=request).id


def test_runner_stores_exactly_what_the_kind_returns_once(db) -> None:
    sessions, settings, tenant_id = db
    request = bound_request(seed=5)
    audit_id = _add(sessions, tenant_id, request)
    assert run_audit(audit_id, session_factory=sessions, settings=settings) == AuditState.SUCCEEDED
    module = kind_module("bound")
    expected = module.run(module.Request.model_validate(request), RunContext()).stored()
    with sessions() as s:
        audit = s.get(Audit, audit_id)
        assert audit.result == expected and audit.attempt == 1 and audit.progress_fraction == 1.0
    assert run_audit(audit_id, session_factory=sessions, settings=settings) is None  # finished: not re-run
    with sessions() as s:
        assert s.get(Audit, audit_id).attempt == 1


def _claimed(sessions, tenant_id: str) -> tuple[str, int]:
    audit_id = _add(sessions, tenant_id, bound_request())
    with sessions.begin() as s:
        attempt = audits.claim_audit(s, audit_id=audit_id, stale_before=utcnow())
    return audit_id, attempt


def test_progress_is_written_throttled_and_stops_on_cancel(db) -> None:
    sessions, _, tenant_id = db
    audit_id, attempt = _claimed(sessions, tenant_id)
    progress = DbProgress(
        session_factory=sessions, audit_id=audit_id, attempt=attempt, max_seconds=60, min_interval=0.2
    )
    progress("collect", 0.25, "first batch")
    progress("collect", 0.5, "within the interval: not written")
    with sessions() as s:
        audit = s.get(Audit, audit_id)
        assert (audit.progress_stage, audit.progress_fraction, audit.progress_message) == (
            "collect",
            0.25,
            "first batch",
        )
        assert audit.progress_eta_seconds is not None and audit.progress_eta_seconds >= 0
    progress("bound", 0.9)  # a new stage is written at once
    with sessions() as s:
        assert s.get(Audit, audit_id).progress_stage == "bound"
    with sessions.begin() as s:
        s.execute(update(Audit).where(Audit.id == audit_id).values(cancel_requested=True))
    with pytest.raises(AuditCancelled):
        progress("cancel me", 0.95)


def test_progress_stops_past_the_deadline_and_after_losing_the_claim(db) -> None:
    sessions, _, tenant_id = db
    audit_id, attempt = _claimed(sessions, tenant_id)
    with pytest.raises(DeadlineExceeded):
        DbProgress(session_factory=sessions, audit_id=audit_id, attempt=attempt, max_seconds=0)("x", 0.1)
    progress = DbProgress(session_factory=sessions, audit_id=audit_id, attempt=attempt, max_seconds=60)
    with sessions.begin() as s:  # presumed dead and taken over by attempt 2
        s.execute(update(Audit).values(heartbeat_at=utcnow() - timedelta(hours=1)))
        assert audits.claim_audit(s, audit_id=audit_id, stale_before=utcnow()) == attempt + 1
    with pytest.raises(ClaimLost):
        progress("x", 0.2)


def test_unknown_uploaded_dataset_fails_with_a_message(db) -> None:
    sessions, settings, tenant_id = db
    audit_id = _add(sessions, tenant_id, long_mia_request(trials=1000) | {"dataset": "f" * 32})
    assert run_audit(audit_id, session_factory=sessions, settings=settings) == AuditState.FAILED
    with sessions() as s:
        error = s.get(Audit, audit_id).error
    assert error["code"] == "AUDIT_ERROR" and "unknown dataset" in error["message"]


def test_sweep_reruns_an_audit_whose_process_died(db) -> None:
    sessions, settings, tenant_id = db
    audit_id = _add(sessions, tenant_id, bound_request())
    with sessions.begin() as s:  # a runner claimed it, then its process died: no heartbeat since
        s.execute(
            update(Audit).values(
                state=AuditState.RUNNING, attempt=1, heartbeat_at=utcnow() - timedelta(minutes=5)
            )
        )
    with TestClient(create_app(settings)) as client:
        done = wait_for(client.get, audit_id, timeout=30)
    assert done["state"] == "SUCCEEDED" and done["attempt"] == 2


def test_shutdown_returns_a_running_inline_audit_to_pending(db) -> None:
    """Held RUNNING in its worker process by testkit/held_endpoint.py, not by its size: its calls are
    released only once the shutdown began, so the audit cannot end first on a fast machine."""
    sessions, settings, tenant_id = db
    with HeldEndpoint() as gate:
        audit_id = _add(sessions, tenant_id, gate.request())
        allowed = settings.model_copy(update={"endpoint_allowlist": [gate.url]})
        executor = InlineExecutor(session_factory=sessions, settings=allowed)
        executor.submit(audit_id)
        gate.wait_held()
        with sessions() as s:
            assert s.get(Audit, audit_id).state == AuditState.RUNNING
        closing = threading.Thread(target=executor.close)
        closing.start()
        deadline = time.monotonic() + 30
        while not executor._stopping.is_set():  # the shutdown began: the held call may return now
            assert time.monotonic() < deadline, "close() did not begin"
            time.sleep(0.01)
        gate.release()
        closing.join(timeout=120)
        assert not closing.is_alive()
    with sessions() as s:
        audit = s.get(Audit, audit_id)
        assert (audit.state, audit.enqueued_at, audit.result) == (AuditState.PENDING, None, None)


def test_an_attempt_past_its_lease_pauses_until_a_heartbeat_confirms_it_or_it_is_taken_over(db) -> None:
    """The lease: with no heartbeat through for `lease` seconds an attempt may not compute on; a heartbeat
    that gets through lets it go on, a claim taken by another attempt stops it (never two at once)."""
    sessions, _, tenant_id = db
    audit_id, attempt = _claimed(sessions, tenant_id)
    progress = DbProgress(
        session_factory=sessions, audit_id=audit_id, attempt=attempt, max_seconds=60, lease=0.2
    )
    heartbeat = Heartbeat(
        session_factory=sessions, audit_id=audit_id, attempt=attempt, interval=0.05, progress=progress
    )

    def call(outcome: list[str]) -> None:
        try:
            progress("simulate", 0.5)
            outcome.append("computing")
        except ClaimLost:
            outcome.append("stopped")

    time.sleep(0.3)  # the lease ran out: nothing renewed it since the claim
    first: list[str] = []
    waiting = threading.Thread(target=call, args=(first,))
    waiting.start()
    time.sleep(0.3)
    assert waiting.is_alive() and first == []  # paused
    assert heartbeat.beat()  # the database answers again and the claim is still ours
    waiting.join(5)
    assert first == ["computing"]

    time.sleep(0.3)
    second: list[str] = []
    waiting = threading.Thread(target=call, args=(second,))
    waiting.start()
    with sessions.begin() as s:  # meanwhile presumed dead and claimed by attempt 2
        s.execute(update(Audit).values(heartbeat_at=utcnow() - timedelta(hours=1)))
        assert audits.claim_audit(s, audit_id=audit_id, stale_before=utcnow()) == attempt + 1
    with heartbeat:  # its next heartbeat finds the claim lost
        waiting.join(5)
    assert second == ["stopped"]
