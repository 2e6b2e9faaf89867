"""`iclaudit serve --workers 2` on PostgreSQL with Celery (issue 22 §5): each API process keeps the answers
of the audits it polled (app/api/shared_poll.py), and a poll through one process sees at once what another
process or the worker wrote. Real servers: PostgreSQL, Redis (the broker and the shared rate limits) and
two API processes; the test itself writes as the Celery worker does (app.db.audits' runner side), so each
write is committed at a moment it knows, and polls both processes right after it, each on a kept-alive
connection that stays with its process."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from datetime import timedelta

import httpx
import pytest

from app.db import audits
from app.db.engine import make_engine, make_session_factory
from app.db.models import Audit, AuditState, utcnow
from app.schemas.audits import AuditResource
from testkit.client import bound_request
from testkit.served import start_serve, stop
from testkit.servers import create_database, postgres_server, redis_server, wait_for_port  # noqa: F401 - fixtures
from testkit.tenants import create_key


@pytest.fixture(scope="module")
def served(tmp_path_factory, postgres_server, redis_server) -> Iterator[tuple[str, str, str]]:  # noqa: F811
    """(base URL, API key, database URL) of two API processes on one port."""
    state = tmp_path_factory.mktemp("workers-pg")
    url = create_database(postgres_server.url, "iclaudit_workers_pg")
    key = create_key(url, "w-pg", migrate=True)
    env = {
        **os.environ,
        "ICLAUDIT_STATE_DIR": str(state),
        "ICLAUDIT_DATABASE_URL": url,
        "ICLAUDIT_BROKER_URL": redis_server.url,  # also where the rate limits are counted
        "ICLAUDIT_EXECUTOR": "celery",
        "ICLAUDIT_AUTH_ENABLED": "true",
        "ICLAUDIT_PRELOAD_MODELS": "false",
        "HF_HUB_OFFLINE": "1",
        # the connections this test keeps stay open between its polls on a loaded machine
        "ICLAUDIT_KEEP_ALIVE_SECONDS": "120",
        "ICLAUDIT_HEADER_TIMEOUT_SECONDS": "120",
    }
    env.pop("ICLAUDIT_RATE_LIMIT_STORAGE", None)
    proc, port = start_serve(state, env, "--workers", "2")
    try:
        wait_for_port(port, proc, "iclaudit serve --workers 2", timeout=120)
        yield f"http://127.0.0.1:{port}", key, url
    finally:
        stop(proc)


def _process(response: httpx.Response) -> str:
    """The process that answered: a request id's first half is its process's (app.observability)."""
    return response.headers["X-Request-ID"][:16]


def _one_per_process(base: str, key: str, path: str) -> tuple[httpx.Client, httpx.Client, list[httpx.Client]]:
    """Two clients of one kept-alive connection each, answered by different processes (and every client
    opened, to close)."""
    opened: list[httpx.Client] = []
    by_process: dict[str, httpx.Client] = {}
    deadline = time.monotonic() + 60
    while len(by_process) < 2:
        assert time.monotonic() < deadline, f"one process answered every connection: {list(by_process)}"
        client = httpx.Client(
            base_url=base,
            headers={"Authorization": f"Bearer {key}"},
            limits=httpx.Limits(max_connections=1),
            timeout=30,
        )
        opened.append(client)
        process = _process(client.get(path))
        if process in by_process:
            client.close()
        else:
            by_process[process] = client
    a, b = by_process.values()
    return a, b, opened


def _poll(client: httpx.Client, path: str, process: str) -> dict:
    response = client.get(path)
    assert response.status_code == 200, response.text
    assert _process(response) == process  # still the same process (the connection was kept alive)
    return response.json()


def test_a_poll_through_one_process_sees_what_the_other_or_the_worker_wrote(served) -> None:
    base, key, url = served
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        submitted = api.post("/v1/audits", json=bound_request())
        assert submitted.status_code == 202, submitted.text
    path = f"/v1/audits/{submitted.json()['id']}"
    a, b, opened = _one_per_process(base, key, path)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    try:
        pa, pb = _process(a.get(path)), _process(b.get(path))
        assert pa != pb
        with sessions.begin() as session:  # the worker claims it
            attempt = audits.claim_audit(
                session, audit_id=path.rsplit("/", 1)[1], stale_before=utcnow() - timedelta(hours=1)
            )
        assert attempt is not None
        audit_id = path.rsplit("/", 1)[1]
        seen: list[tuple[str, float, float]] = []
        for i in range(1, 21):
            for client, process in ((a, pa), (b, pb)):  # kept in both processes before the write
                for _ in range(3):
                    _poll(client, path, process)
            fraction = i / 20
            with sessions.begin() as session:  # the worker's progress, committed now
                assert audits.record_progress(
                    session,
                    audit_id=audit_id,
                    attempt=attempt,
                    stage=f"step {i}",
                    fraction=fraction,
                    eta_seconds=None,
                    message="",
                )
            with sessions() as session:  # the answer as the route renders it from its own read
                row = session.get(Audit, audit_id)
                expected = AuditResource.of(row).model_dump_json().encode()
            for client, process in ((a, pa), (b, pb)):
                response = client.get(path)  # a moved version: re-read and rendered before the stack
                assert response.status_code == 200 and _process(response) == process
                assert response.content == expected
                polled = response.json()
                seen.append((process, polled["progress"]["fraction"], fraction))
                assert polled["state"] == "RUNNING"
                assert (polled["progress"]["stage"], polled["progress"]["fraction"]) == (
                    f"step {i}",
                    fraction,
                )

        # a cancel through process B is seen by a poll through process A right after it answers
        _poll(a, path, pa)
        cancelled = b.post(f"{path}/cancel")
        assert cancelled.status_code == 200 and _process(cancelled) == pb, cancelled.text
        assert _poll(a, path, pa)["cancel_requested"] is True

        # the worker ends the attempt: both processes answer the final state at once
        with sessions.begin() as session:
            assert audits.finish_audit(
                session, audit_id=audit_id, attempt=attempt, state=AuditState.CANCELLED, stage="cancelled"
            )
        for client, process in ((a, pa), (b, pb)):
            assert _poll(client, path, process)["state"] == "CANCELLED"
        print(f"40 polls right after a write, through {pa} and {pb}: {len(seen)} saw it")
    finally:
        engine.dispose()
        for client in opened:
            client.close()
