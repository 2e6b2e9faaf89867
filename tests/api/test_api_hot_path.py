"""The polling hot path on the real app and both databases: a poll of a finished audit by a recently
verified key is one narrow query (no key or tenant read, no full row, no rendering); revocation in this
process is at once, elsewhere within the verified-key TTL. (The audit processes' lower CPU priority is
tested in tests/jobs/test_pool.py.)"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, select, update

from app.api import poll
from app.api.state import state_of
from app.db import audits as audit_rows
from app.db import keys
from app.db.engine import make_engine, make_session_factory
from app.db.models import ApiKey, Audit, utcnow
from testkit.client import bound_request, wait_for
from testkit.held_endpoint import HeldEndpoint


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
    engine = state_of(client.app).session_factory.kw["bind"]
    first = client.get(f"/v1/audits/{audit['id']}")  # wait_for's last poll rendered the finished audit
    assert first.status_code == 200 and first.json()["state"] == "SUCCEEDED"
    slots = state_of(client.app).db_slots
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
    engine = state_of(client.app).session_factory.kw["bind"]
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


def test_healthz_needs_no_database_and_no_slot(client) -> None:
    engine = state_of(client.app).session_factory.kw["bind"]
    slots = state_of(client.app).db_slots
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


# --- app/api/poll.py: the outermost answer to polls of audits rendered here (issue 23) ----------------


def _finished_audit(client, interval: float = 0.05) -> str:
    audit_id = client.post("/v1/audits", json=bound_request()).json()["id"]
    deadline = time.monotonic() + 60
    while client.get(f"/v1/audits/{audit_id}").json()["state"] != "SUCCEEDED":  # the last read renders it
        assert time.monotonic() < deadline
        time.sleep(interval)
    return audit_id


def _headers(response) -> dict[str, str]:
    return {k: v for k, v in response.headers.items() if k != "x-request-id"}


def test_the_outermost_answer_is_the_stacks_answer(client) -> None:
    """A poll with no query string takes app.api.poll; `?wait=0` goes down the stack (a query string):
    the same status, body and headers, for 200 and 304, and each carries a request id."""
    audit_id = _finished_audit(client)
    fast, stack = client.get(f"/v1/audits/{audit_id}"), client.get(f"/v1/audits/{audit_id}?wait=0")
    assert fast.status_code == stack.status_code == 200
    assert fast.content == stack.content and _headers(fast) == _headers(stack)
    etag = {"If-None-Match": fast.headers["ETag"]}
    fast = client.get(f"/v1/audits/{audit_id}", headers=etag)
    stack = client.get(f"/v1/audits/{audit_id}?wait=0", headers=etag)
    assert fast.status_code == stack.status_code == 304
    assert fast.content == stack.content == b"" and _headers(fast) == _headers(stack)
    assert len(fast.headers["X-Request-ID"]) == len(stack.headers["X-Request-ID"]) == 32
    assert fast.headers["X-Request-ID"] != stack.headers["X-Request-ID"]
    given = client.get(f"/v1/audits/{audit_id}", headers={"X-Request-ID": "dash-7"})
    assert given.headers["X-Request-ID"] == "dash-7"


def test_outermost_answers_count_in_metrics_and_rate_limits(app_client, make_key) -> None:
    with app_client(rate_limit="30/minute") as client:
        client.headers["Authorization"] = f"Bearer {make_key('erin')}"
        audit_id = _finished_audit(client, interval=0.5)  # a few polls of the 30
        statuses = [client.get(f"/v1/audits/{audit_id}").status_code for _ in range(40)]
        assert statuses.count(200) > 0 and statuses[-1] == 429
        refused = client.get(f"/v1/audits/{audit_id}")
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
        assert "ICLAUDIT_RATE_LIMIT" in refused.json()["error"]["message"]
        assert refused.headers["X-Content-Type-Options"] == "nosniff"
        token = {"Authorization": f"Bearer {state_of(client.app).settings.metrics_token}"}
        text = client.get("/metrics", headers=token).text
    counted = {
        status: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("http_requests_total{")
        and 'handler="/v1/audits/{audit_id}"' in line
        and 'method="GET"' in line
        for status in ("200", "429")
        if f'status="{status}"' in line
    }
    assert counted["200"] >= statuses.count(200) and counted["429"] >= statuses.count(429) + 1


@contextmanager
def _held(app_client, make_key, **changes) -> Iterator[tuple[Any, HeldEndpoint, str]]:
    """(client, gate, audit id): an audit RUNNING at a gate in the single worker process, its answer kept
    here (rendered by a first poll)."""
    with HeldEndpoint() as gate, app_client(endpoint_allowlist=[gate.url], **changes) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        try:
            audit_id = client.post("/v1/audits", json=gate.request()).json()["id"]
            gate.wait_held()
            wait_for(client.get, audit_id, ("RUNNING",))
            yield client, gate, audit_id
        finally:
            gate.release()


QUIET = {"heartbeat_seconds": 60.0, "stale_after_seconds": 600.0}  # no heartbeat write during a test


def test_a_running_audits_kept_answer_ends_with_the_next_write(app_client, make_key) -> None:
    """A running audit's answer is kept (inline executor): a poll reads nothing while no write began;
    after a write in this process (a cancel) the next poll shows it."""
    with _held(app_client, make_key, **QUIET) as (client, _, audit_id):
        engine = state_of(client.app).session_factory.kw["bind"]
        first = client.get(f"/v1/audits/{audit_id}")
        assert first.json()["state"] == "RUNNING"
        with _statements(engine) as seen:
            again = client.get(f"/v1/audits/{audit_id}")
        assert seen == [] and again.content == first.content
        assert client.post(f"/v1/audits/{audit_id}/cancel").status_code == 200
        after = client.get(f"/v1/audits/{audit_id}")
        assert after.headers["ETag"] != first.headers["ETag"]
        assert after.json()["state"] == "RUNNING" and after.json()["cancel_requested"] is True


_RANK = {"PENDING": 0, "RUNNING": 1, "SUCCEEDED": 2, "FAILED": 2, "CANCELLED": 2}


def test_the_audit_processs_writes_show_in_the_next_poll(app_client, make_key) -> None:
    """Across processes (app/jobs/pool.py): once the worker process's write is in the database, the next
    poll answers it, never the kept answer from before: its state is never behind the stored one read
    just before, and the stored end state is the answer at once."""
    with _held(app_client, make_key, **QUIET) as (client, gate, audit_id):
        sessions = state_of(client.app).session_factory
        path = f"/v1/audits/{audit_id}"
        assert client.get(path).json()["state"] == "RUNNING"  # kept
        gate.release()
        deadline = time.monotonic() + 60
        while True:
            with sessions() as session:
                stored = session.execute(select(Audit.state, Audit.attempt).where(Audit.id == audit_id)).one()
            answer = client.get(path).json()
            assert _RANK[answer["state"]] >= _RANK[stored.state], (answer["state"], stored.state)
            if _RANK[stored.state] == 2:
                assert answer["state"] == stored.state and answer["attempt"] == stored.attempt
                break
            assert time.monotonic() < deadline, "the audit did not end"


def test_a_write_to_one_audit_keeps_the_others_answers(app_client, make_key, monkeypatch) -> None:
    """Invalidation is by audit: a write by the process running one audit (its heartbeat) ends that
    audit's kept answer only; another audit's (queued, PENDING) is still served without a read."""
    monkeypatch.setattr(poll, "RUNNING_TTL_SECONDS", 600.0)
    with _held(app_client, make_key, heartbeat_seconds=0.3) as (client, _, running):
        engine = state_of(client.app).session_factory.kw["bind"]
        queued = client.post("/v1/audits", json=bound_request()).json()["id"]
        writes = state_of(client.app).executor.writes
        deadline = time.monotonic() + 30
        while True:  # until its answer is kept: one read with none of this process's writes in flight
            with _statements(engine) as seen:
                kept = client.get(f"/v1/audits/{queued}")
            if not any("FROM audits" in statement for statement in seen):
                break
            assert time.monotonic() < deadline, "the queued audit's answer is never kept"
        assert kept.json()["state"] == "PENDING"
        client.get(f"/v1/audits/{running}")
        api_writes, before = writes.stamp(0), writes.stamp(1)  # slot 0: this process; 1: the worker
        while (now := writes.stamp(1)) is None or now == before:  # until its next heartbeat is written
            assert time.monotonic() < deadline, "no heartbeat"
            time.sleep(0.02)
        with _statements(engine) as seen:
            again = client.get(f"/v1/audits/{queued}")
        assert writes.stamp(0) == api_writes  # no write of this process's own in between
        # served as kept, without a read of the audit (its key may be re-checked: keys.VERIFIED_TTL_SECONDS)
        assert again.content == kept.content
        assert not any("FROM audits" in statement for statement in seen), seen
        with _statements(engine) as seen:
            assert client.get(f"/v1/audits/{running}").json()["state"] == "RUNNING"
        assert any("FROM audits" in statement for statement in seen), seen  # re-read


def test_polls_during_a_storm_of_writes_are_never_behind(app_client, make_key) -> None:
    """Progress written every few milliseconds (as the runner writes it): each poll answers a read begun
    after it arrived, so its fraction is never below the one committed before the poll was sent."""
    with _held(app_client, make_key, **QUIET) as (client, _, audit_id):
        sessions = state_of(client.app).session_factory
        with sessions() as session:
            attempt = session.execute(select(Audit.attempt).where(Audit.id == audit_id)).scalar_one()
        committed = [0.0]
        stop = threading.Event()

        def write() -> None:
            step = 0
            while not stop.is_set():
                step += 1
                with sessions.begin() as session:
                    audit_rows.record_progress(
                        session,
                        audit_id=audit_id,
                        attempt=attempt,
                        stage="trials",
                        fraction=step / 1e6,
                        eta_seconds=None,
                        message="",
                    )
                committed[0] = step / 1e6
                time.sleep(0.002)

        writer = threading.Thread(target=write)
        writer.start()
        try:
            for _ in range(200):
                before = committed[0]
                answer = client.get(f"/v1/audits/{audit_id}").json()
                assert answer["progress"]["fraction"] >= before, (answer["progress"], before)
        finally:
            stop.set()
            writer.join(timeout=30)
        assert committed[0] > 0


def test_a_stale_answer_is_read_again_once_for_concurrent_polls(app_client, make_key) -> None:
    """After a write, polls of the audit that arrive while it is read again wait for that one read."""
    with _held(app_client, make_key, **QUIET) as (client, _, audit_id):
        engine = state_of(client.app).session_factory.kw["bind"]
        path = f"/v1/audits/{audit_id}"
        client.get(path)
        assert client.post(f"{path}/cancel").status_code == 200  # a write: the kept answer ends
        answers: list[Any] = []
        with _statements(engine) as seen:
            polls = [threading.Thread(target=lambda: answers.append(client.get(path))) for _ in range(16)]
            for poll in polls:
                poll.start()
            for poll in polls:
                poll.join(timeout=30)
        assert len(answers) == 16 and all(a.json()["cancel_requested"] is True for a in answers)
        assert sum("FROM audits" in statement for statement in seen) == 1, seen


def test_a_remembered_key_is_renewed_before_its_memo_runs_out(client, monkeypatch) -> None:
    """Past half its TTL, a poll renews the key in the background, so the polls after the TTL still need
    no request slot or database (a fleet would otherwise all read the key's row at once)."""
    audit_id = _finished_audit(client)
    monkeypatch.setattr(keys, "VERIFIED_TTL_SECONDS", 1.0)
    assert client.get("/v1/audits?page_size=1").status_code == 200  # verified now
    time.sleep(0.6)
    assert client.get(f"/v1/audits/{audit_id}").status_code == 200  # past half: renewed in the background
    time.sleep(0.6)  # past the first verification's TTL
    slots = state_of(client.app).db_slots
    taken = 0
    while slots.value > 0:  # every request slot held: a poll that read the key's row would wait, then 503
        slots.acquire_nowait()
        taken += 1
    try:
        assert client.get(f"/v1/audits/{audit_id}").status_code == 200
    finally:
        for _ in range(taken):
            slots.release()
