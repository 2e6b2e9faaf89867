"""`iclaudit serve --workers 2` (issue 22 §5): two API processes on one port, each with its own caches,
stay correct together. Against a real server (SQLite, inline executor, auth on) and a real Redis for the
rate limits: the limit holds for the tenant across both processes, a finished audit's kept answer is the
same from either, a key revoked elsewhere is refused by both within the verified-key TTL, and without
shared limits the command refuses to start."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from app.db import keys
from app.db.engine import make_engine, make_session_factory
from app.db.migrate import upgrade
from testkit.client import bound_request
from testkit.served import ICLAUDIT, make_key, start_serve, stop
from testkit.servers import free_port, redis_server, wait_for_port  # noqa: F401 - a fixture

LIMIT = 120


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory, redis_server) -> Iterator[tuple[str, Path]]:  # noqa: F811
    state = tmp_path_factory.mktemp("workers")
    upgrade(f"sqlite:///{state / 'iclaudit.db'}")
    env = {
        **os.environ,
        "ICLAUDIT_STATE_DIR": str(state),
        "ICLAUDIT_AUTH_ENABLED": "true",
        "ICLAUDIT_PRELOAD_MODELS": "false",
        "ICLAUDIT_RATE_LIMIT_STORAGE": redis_server.url,
        "ICLAUDIT_RATE_LIMIT": f"{LIMIT}/minute",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("ICLAUDIT_DATABASE_URL", None)
    env.pop("ICLAUDIT_BROKER_URL", None)
    proc, port = start_serve(state, env, "--workers", "2")
    try:
        wait_for_port(port, proc, "iclaudit serve --workers 2", timeout=120)
        time.sleep(3)  # both workers up
        yield f"http://127.0.0.1:{port}", state
    finally:
        stop(proc)


def _fresh_gets(url: str, key: str, n: int) -> list[httpx.Response]:
    """`n` GETs, each on a new connection (the processes take turns accepting them), 8 at a time."""

    def get(_: int) -> httpx.Response:
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
            return client.get(url)

    with ThreadPoolExecutor(8) as pool:
        return list(pool.map(get, range(n)))


def _processes(responses: list[httpx.Response]) -> set[str]:
    """The processes that answered: a request id's first half is its process's (app.observability)."""
    return {r.headers["X-Request-ID"][:16] for r in responses}


def test_the_rate_limit_holds_across_the_processes(two) -> None:
    url, state = two
    responses = _fresh_gets(f"{url}/v1/models", make_key(state, "w-rate"), 2 * LIMIT)
    statuses = [r.status_code for r in responses]
    print(f"{2 * LIMIT} requests over {len(_processes(responses))} processes: {statuses.count(200)} × 200")
    assert len(_processes(responses)) == 2
    assert statuses.count(200) == LIMIT and statuses.count(429) == LIMIT


def test_a_finished_audits_kept_answer_is_the_same_from_both(two) -> None:
    url, state = two
    key = make_key(state, "w-cache")
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as api:
        audit = api.post("/v1/audits", json=bound_request()).json()
        deadline = time.monotonic() + 120
        while (polled := api.get(f"/v1/audits/{audit['id']}")).json().get("state") != "SUCCEEDED":
            assert time.monotonic() < deadline and polled.status_code == 200, polled.text
            time.sleep(0.5)
    responses = _fresh_gets(f"{url}/v1/audits/{audit['id']}", key, 16)
    assert len(_processes(responses)) == 2
    assert {r.status_code for r in responses} == {200}
    assert len({r.content for r in responses}) == 1 and len({r.headers["ETag"] for r in responses}) == 1
    assert responses[0].json()["state"] == "SUCCEEDED"


def test_a_key_revoked_elsewhere_is_refused_by_both_within_the_ttl(two) -> None:
    url, state = two
    key = make_key(state, "w-revoke")
    before = _fresh_gets(f"{url}/v1/audits", key, 8)
    assert {r.status_code for r in before} == {200} and len(_processes(before)) == 2  # remembered in both
    engine = make_engine(f"sqlite:///{state / 'iclaudit.db'}")
    try:
        with make_session_factory(engine).begin() as session:  # as `iclaudit keys revoke` does
            assert keys.revoke_api_key(session, keys.parse_api_key(key)[0])
    finally:
        engine.dispose()
    time.sleep(keys.VERIFIED_TTL_SECONDS + 0.5)
    after = _fresh_gets(f"{url}/v1/audits", key, 8)
    print(f"{keys.VERIFIED_TTL_SECONDS + 0.5:.1f} s after the revocation: {[r.status_code for r in after]}")
    assert {r.status_code for r in after} == {401} and len(_processes(after)) == 2


def test_several_processes_without_shared_limits_refuse_to_start(tmp_path: Path) -> None:
    env = {**os.environ, "ICLAUDIT_STATE_DIR": str(tmp_path)}
    for name in ("ICLAUDIT_RATE_LIMIT_STORAGE", "ICLAUDIT_BROKER_URL"):
        env.pop(name, None)
    done = subprocess.run(
        [str(ICLAUDIT), "serve", "--port", str(free_port()), "--workers", "2"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "ICLAUDIT_RATE_LIMIT_STORAGE" in done.stderr
