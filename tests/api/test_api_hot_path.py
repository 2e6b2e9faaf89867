"""The polling hot path on the real app and both databases: a poll of a finished audit by a recently
verified key is one narrow query (no key or tenant read, no full row, no rendering); revocation in this
process is at once, elsewhere within the verified-key TTL; the inline executor's audit thread runs at a
lower CPU priority than the requests."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from service.client import bound_request, wait_for
from sqlalchemy import event, update

from app.db import keys
from app.db.engine import make_engine, make_session_factory
from app.db.models import ApiKey, utcnow
from app.jobs import executors


@contextmanager
def _statements(engine) -> Iterator[list[str]]:
    """The SQL statements `engine` sends while the block runs."""
    seen: list[str] = []

    def record(_conn, _cursor, statement, *_args) -> None:
        seen.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


def test_a_poll_of_a_finished_audit_needs_no_database_thread_or_slot(client) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    wait_for(client.get, audit["id"])
    engine = client.app.state.session_factory.kw["bind"]
    first = client.get(f"/v1/audits/{audit['id']}")  # wait_for's last poll rendered the finished audit
    assert first.status_code == 200 and first.json()["state"] == "SUCCEEDED"
    slots = client.app.state.db_slots
    taken = 0
    while slots.value > 0:  # every request slot held: a poll that needed one would wait, then 503
        slots.acquire_nowait()
        taken += 1
    try:
        with _statements(engine) as seen:
            again = client.get(f"/v1/audits/{audit['id']}")
            etag = first.headers["ETag"]
            unchanged = client.get(f"/v1/audits/{audit['id']}", headers={"If-None-Match": etag})
            waited = client.get(f"/v1/audits/{audit['id']}", params={"wait": "30s"})
    finally:
        for _ in range(taken):
            slots.release()
    assert seen == []
    assert again.status_code == 200 and again.content == first.content and again.headers["ETag"] == etag
    assert again.headers["Cache-Control"] == first.headers["Cache-Control"]
    assert unchanged.status_code == 304 and unchanged.headers["ETag"] == etag
    assert waited.status_code == 200 and waited.content == first.content  # finished: answered at once


def test_a_poll_by_a_key_not_remembered_takes_the_database_path(client, make_key, monkeypatch) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    wait_for(client.get, audit["id"])
    first = client.get(f"/v1/audits/{audit['id']}")
    monkeypatch.setattr(keys, "VERIFIED_TTL_SECONDS", 0.0)  # every key must be looked up again
    engine = client.app.state.session_factory.kw["bind"]
    with _statements(engine) as seen:
        again = client.get(f"/v1/audits/{audit['id']}")
    assert again.content == first.content
    assert len(seen) == 1 and "api_keys" in seen[0], seen  # the key's row; the body from memory


def test_another_tenant_never_gets_a_cached_body(client, make_key) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    wait_for(client.get, audit["id"])
    assert client.get(f"/v1/audits/{audit['id']}").status_code == 200  # cached now
    as_bob = {"Authorization": f"Bearer {make_key('bob')}"}
    assert client.get(f"/v1/audits/{audit['id']}", headers=as_bob).status_code == 404


def test_revocation_here_is_immediate_elsewhere_within_the_ttl(
    client, make_key, settings, monkeypatch
) -> None:
    key = make_key("carol")
    auth = {"Authorization": f"Bearer {key}"}
    key_id = keys.parse_api_key(key)[0]
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_session_factory(engine)
    try:
        assert client.get("/v1/audits", headers=auth).status_code == 200
        # revoked by another process (a plain UPDATE: this process's memo is not told): still trusted
        # until the TTL runs out, then refused
        with sessions.begin() as session:
            session.execute(update(ApiKey).where(ApiKey.id == key_id).values(revoked_at=utcnow()))
        assert client.get("/v1/audits", headers=auth).status_code == 200
        monkeypatch.setattr(keys, "VERIFIED_TTL_SECONDS", 0.0)
        assert client.get("/v1/audits", headers=auth).status_code == 401

        other = make_key("carol")
        monkeypatch.setattr(keys, "VERIFIED_TTL_SECONDS", 3600.0)
        assert client.get("/v1/audits", headers={"Authorization": f"Bearer {other}"}).status_code == 200
        with sessions.begin() as session:  # revoked through the repository in this process: at once
            assert keys.revoke_api_key(session, keys.parse_api_key(other)[0])
        assert client.get("/v1/audits", headers={"Authorization": f"Bearer {other}"}).status_code == 401
    finally:
        engine.dispose()


def test_a_wrong_secret_never_rides_on_a_verified_key(client, make_key) -> None:
    key = make_key("dave")
    assert client.get("/v1/audits", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    forged = key[:-4] + ("AAAA" if not key.endswith("AAAA") else "BBBB")
    assert client.get("/v1/audits", headers={"Authorization": f"Bearer {forged}"}).status_code == 401


def test_audit_threads_run_below_the_requests_priority() -> None:
    if not hasattr(os, "setpriority"):
        pytest.skip("no per-thread priorities on this platform")
    seen: dict[str, int] = {}

    def probe() -> None:
        executors._lower_thread_priority()
        seen["nice"] = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    assert seen["nice"] == min(19, base + executors.AUDIT_NICE)
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # this thread untouched


def test_healthz_needs_no_database_and_no_slot(client) -> None:
    engine = client.app.state.session_factory.kw["bind"]
    slots = client.app.state.db_slots
    taken = 0
    while slots.value > 0:  # every request slot held: a route needing one would wait, then 503
        slots.acquire_nowait()
        taken += 1
    try:
        with _statements(engine) as seen:
            assert client.get("/healthz").json() == {"status": "ok"}
        assert seen == []
    finally:
        for _ in range(taken):
            slots.release()
