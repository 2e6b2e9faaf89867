"""app/jobs/release.py on both dialects: what the Celery executor holds back and what it releases."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from app.db import audits, keys
from app.db.engine import make_engine, make_session_factory
from app.db.models import Audit, AuditState, utcnow
from app.jobs.release import GRACE_SECONDS, admit, by_tenant_turns, held
from testkit.client import bound_request


@pytest.fixture
def sessions(database_url: str, tmp_path: Path):
    engine = make_engine(database_url)
    yield make_session_factory(engine)
    engine.dispose()


def _audits(sessions, tenant: str, n: int, age: float = GRACE_SECONDS + 60) -> list[str]:
    """`n` PENDING audits of `tenant`, created `age` seconds ago (one second apart, oldest first)."""
    with sessions.begin() as s:
        tenant_id = keys.get_or_create_tenant(s, tenant).id
        ids = [
            audits.add_audit(s, tenant_id=tenant_id, kind="bound", request=bound_request()).id
            for _ in range(n)
        ]
    with sessions.begin() as s:
        for i, audit_id in enumerate(ids):
            created = utcnow() - timedelta(seconds=age + n - i)
            s.execute(update(Audit).where(Audit.id == audit_id).values(created_at=created))
    return ids


def test_each_tenant_gets_room_for_n_in_the_broker(sessions) -> None:
    flood = _audits(sessions, "flood", 6)
    well = _audits(sessions, "well", 1)
    with sessions.begin() as s:  # the flood has one audit running and one queued in this epoch
        s.execute(update(Audit).where(Audit.id == flood[0]).values(state=AuditState.RUNNING))
        audits.mark_enqueued(s, [flood[1]], queue_epoch="e1", sent_at=utcnow())
    with sessions() as s:
        assert admit(s, flood[2:] + well, epoch="e1", per_tenant=2) == well  # the flood has no room
        assert admit(s, flood[2:] + well, epoch="e1", per_tenant=3) == [flood[2], *well]
        assert admit(s, [flood[0]], epoch="e1", per_tenant=1) == [flood[0]]  # a re-run of a RUNNING one
        # a queue that restarted empty (another epoch): only the running audit counts
        assert admit(s, flood[1:], epoch="e2", per_tenant=2) == [flood[1]]


def test_held_lists_each_tenants_oldest_and_leaves_new_audits_to_their_submitter(sessions) -> None:
    flood = _audits(sessions, "flood", 8)
    well = _audits(sessions, "well", 1)
    fresh = _audits(sessions, "well", 1, age=0)  # its submitter may be sending it right now
    with sessions.begin() as s:
        audits.mark_enqueued(s, [flood[0]], queue_epoch="e1", sent_at=utcnow())
        s.execute(update(Audit).where(Audit.id == flood[1]).values(cancel_requested=True))
    with sessions() as s:
        waiting = held(s, epoch="e1", per_tenant=2)
        assert sorted(waiting) == sorted([flood[2], flood[3], *well]) and fresh[0] not in waiting
        assert by_tenant_turns(s, [flood[2], flood[3], well[0]]) == [flood[2], well[0], flood[3]]
