"""Issue 20 M2 at the database: `reserve_active` holds the tenant's lock from its count to the commit, so
a concurrent submit of the same tenant counts after the first one's inserts (no count-then-insert race),
on SQLite (the write lock) and PostgreSQL (the tenant row, FOR NO KEY UPDATE: other tenants go on)."""

from __future__ import annotations

import threading
import time

import pytest

from app.config import Settings
from app.db import audits, keys
from app.db.engine import make_engine, make_session_factory
from app.jobs.checks import QuotaExceeded, reserve_active


def test_a_concurrent_reserve_waits_for_the_first_and_counts_its_audit(database_url: str) -> None:
    engine = make_engine(database_url)
    sessions = make_session_factory(engine)
    settings = Settings(database_url=database_url, max_active_audits=1)
    try:
        with sessions.begin() as session:
            alice = keys.get_or_create_tenant(session, "alice").id
            bob = keys.get_or_create_tenant(session, "bob").id
        first = sessions()
        reserve_active(first, tenant_id=alice, settings=settings)
        audits.add_audit(first, tenant_id=alice, kind="bound", request={"kind": "bound"})
        outcome: dict[str, object] = {}

        def second(tenant_id: str, name: str) -> None:
            session = sessions()
            try:
                reserve_active(session, tenant_id=tenant_id, settings=settings)
                outcome[name] = "reserved"
            except QuotaExceeded as exc:
                outcome[name] = exc
            finally:
                session.rollback()
                session.close()
                outcome[f"{name}_at"] = time.monotonic()

        racer = threading.Thread(target=second, args=(alice, "alice"))
        racer.start()
        if engine.dialect.name == "postgresql":  # another tenant's row is not locked: it goes on at once
            second(bob, "bob")
            assert outcome["bob"] == "reserved"
        time.sleep(0.5)
        assert racer.is_alive() and "alice" not in outcome  # waiting for the first one's lock
        committed = time.monotonic()
        first.commit()
        first.close()
        racer.join(10)
        print(f"{engine.dialect.name}: the second reserve waited, then: {outcome['alice']}")
        assert isinstance(outcome["alice"], QuotaExceeded) and outcome["alice_at"] >= committed  # type: ignore[operator]
        assert "ICLAUDIT_MAX_ACTIVE_AUDITS" in str(outcome["alice"])
    finally:
        engine.dispose()


@pytest.mark.parametrize("adding", [1, 3])
def test_reserve_counts_what_it_adds(database_url: str, adding: int) -> None:
    engine = make_engine(database_url)
    sessions = make_session_factory(engine)
    settings = Settings(database_url=database_url, max_active_audits=3)
    try:
        with sessions.begin() as session:
            tenant = keys.get_or_create_tenant(session, "carol").id
            audits.add_audit(session, tenant_id=tenant, kind="bound", request={"kind": "bound"})
        with sessions() as session:
            if adding == 3:
                with pytest.raises(QuotaExceeded, match="this sweep would add 3"):
                    reserve_active(session, tenant_id=tenant, settings=settings, adding=3, what="this sweep")
            else:
                reserve_active(session, tenant_id=tenant, settings=settings, adding=adding)
    finally:
        engine.dispose()
