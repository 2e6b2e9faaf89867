"""Issue 20 H4 at the database, SQLite and PostgreSQL: a full list page stops once its audits' stored
bytes (computed in SQL) pass `max_bytes`, holds at least one audit, and paging on lists each once."""

from __future__ import annotations

from app.db import audits, keys
from app.db.engine import make_engine, make_session_factory


def test_pages_by_bytes(database_url: str) -> None:
    engine = make_engine(database_url)
    sessions = make_session_factory(engine)
    try:
        with sessions.begin() as session:
            tenant = keys.get_or_create_tenant(session, "dana").id
            made = [
                audits.add_audit(session, tenant_id=tenant, kind="bound", request={"pad": "x" * 10_000}).id
                for _ in range(5)
            ]
            huge = audits.add_audit(session, tenant_id=tenant, kind="bound", request={"pad": "y" * 60_000}).id
        sizes, seen, token = [], [], None
        with sessions() as session:
            while True:
                page = audits.list_audits(
                    session, tenant_id=tenant, page_size=50, page_token=token, max_bytes=25_000
                )
                sizes.append(len(page.items))
                seen += [a.id for a in page.items]
                token = page.next_page_token
                if token is None:
                    break
        print(f"{engine.dialect.name}: 5 audits of ~11 KB and one of ~61 KB, 25 KB pages: {sizes}")
        assert sorted(seen) == sorted([*made, huge]) and len(seen) == len(set(seen))
        assert sizes == [1, 2, 2, 1]  # newest first: the huge one alone, then two by two
    finally:
        engine.dispose()
