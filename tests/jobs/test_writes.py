"""app.jobs.writes: the write counts the kept poll answers (app.api.poll) are checked against."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import event, select, update

from app.db.engine import make_engine, make_session_factory
from app.db.models import Audit, Base, Tenant
from app.jobs.writes import WriteCounts


def test_writes_are_counted_before_they_can_be_seen(tmp_path: Path) -> None:
    """A transaction that writes counts as begun before its COMMIT (its writes are invisible until then)
    or at a flush, and as ended when it is over, committed or rolled back; a read counts nothing."""
    engine = make_engine(f"sqlite:///{tmp_path / 'writes.db'}")
    Base.metadata.create_all(engine)
    sessions = make_session_factory(engine)
    writes = WriteCounts(1)
    unlisten = writes.listen(0)
    seen: list[int | None] = []
    try:
        assert writes.stamp(0) == 0
        with sessions.begin() as session:
            session.execute(select(Audit.id)).all()
        assert writes.stamp(0) == 0
        with sessions.begin() as session:  # a Core UPDATE: counted at its commit
            session.execute(update(Audit).where(Audit.id == "none").values(progress_message="x"))
            assert writes.stamp(0) == 0
            event.listen(session, "after_commit", lambda s: seen.append(writes.stamp(0)), once=True)
        assert seen == [None]  # in flight from before COMMIT until the transaction is over
        assert writes.stamp(0) == 1
        with pytest.raises(RuntimeError), sessions.begin() as session:  # an ORM flush, rolled back
            session.add(Tenant(name="rolled-back"))
            session.flush()
            assert writes.stamp(0) is None
            raise RuntimeError("rolled back")
        assert writes.stamp(0) == 2
        with sessions.begin() as session:  # pending ORM changes flushed by the commit itself
            session.add(Tenant(name="committed"))
            assert writes.stamp(0) == 2
        assert writes.stamp(0) == 3
        writes.begin(0)  # a writer that died mid-write
        assert writes.stamp(0) is None
        writes.reset(0)
        assert writes.stamp(0) == 5
    finally:
        unlisten()
        engine.dispose()
