"""The real stack: PostgreSQL + Redis + `iclaudit worker` subprocesses (Celery, --pool=solo), the API in
this process with the celery executor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient

from app.api.state import state_of
from app.audit.kinds.registry import KINDS
from app.config import Settings, get_settings
from app.jobs.broker import TASK_NAME, create_celery
from app.main import create_app
from testkit import workers
from testkit.client import bound_request, long_mia_request, sse_events, wait_for
from testkit.held_model import held_iclinf, serve_held_model
from testkit.servers import fresh_database
from testkit.tenants import key_maker
from testkit.workers import celery_env, settings_of, stop, wait_ready

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture
def stack(postgres_server, redis_server, tmp_path: Path, data_dir: Path) -> Iterator[dict[str, str]]:
    redis.Redis.from_url(redis_server.url).flushall()
    env = celery_env(fresh_database("postgres", tmp_path), redis_server.url, data_dir, tmp_path) | {
        "ICLAUDIT_PRELOAD_MODELS": "true",
        "ICLAUDIT_DEFAULT_MODEL": "oracle",  # preloaded once per worker process (cheap here)
        "ICLAUDIT_HEARTBEAT_SECONDS": "0.5",
        "ICLAUDIT_STALE_AFTER_SECONDS": "3",
        "ICLAUDIT_SWEEP_SECONDS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    yield env


@pytest.fixture
def start_worker(stack: dict[str, str], tmp_path: Path) -> Iterator[Callable[[str], subprocess.Popen[bytes]]]:
    """Start `iclaudit worker` and wait until Celery says it is ready."""
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str) -> subprocess.Popen[bytes]:
        started.append(workers.start_worker(stack, tmp_path / f"{name}.log"))
        wait_ready(started[-1:], timeout=60)
        return started[-1]

    yield start
    for proc in started:
        stop(proc)


@pytest.fixture
def api(stack: dict[str, str]) -> Iterator[TestClient]:
    with TestClient(create_app(settings_of(stack))) as client:
        yield client


def test_celery_worker_runs_a_bound_audit(api: TestClient, start_worker) -> None:
    worker = start_worker("w1")
    assert b"loading oracle" in worker.log.read_bytes()  # type: ignore[attr-defined]
    # audits run below the priority of an API on the same host (`iclaudit worker --nice`, default 10)
    assert os.getpriority(os.PRIO_PROCESS, worker.pid) == min(19, os.getpriority(os.PRIO_PROCESS, 0) + 10)
    ready = api.get("/readyz").json()
    assert ready["checks"] == {"database": "ok", "broker": "ok"}
    posted = api.post("/v1/audits", json=bound_request())
    audit = posted.json()
    # the worker writes from its own process; the long-poll hub re-checks every second while anyone waits
    changed = api.get(
        f"/v1/audits/{audit['id']}", params={"wait": "30s"}, headers={"If-None-Match": posted.headers["ETag"]}
    )
    assert changed.status_code == 200 and changed.json()["state"] != "PENDING"
    assert [e["state"] for e in sse_events(api, audit["id"])][-1] == "SUCCEEDED"
    done = wait_for(api.get, audit["id"], timeout=60)
    assert done["state"] == "SUCCEEDED" and done["attempt"] == 1, done["error"]
    assert api.get(f"/v1/audits/{audit['id']}/result").json() == done["result"]


@pytest.mark.skipif("mia" not in KINDS, reason="needs the long-running mia kind")
def test_sigkilled_worker_audit_finishes_once_on_a_new_worker_with_the_same_result(
    api: TestClient, start_worker
) -> None:
    request = long_mia_request(trials=400_000, seed=11)
    first = start_worker("w1")
    audit = api.post("/v1/audits", json=request).json()
    running = wait_for(api.get, audit["id"], ("RUNNING",), timeout=60)
    assert running["attempt"] == 1
    first.send_signal(signal.SIGKILL)
    first.wait()

    second = start_worker("w2")
    done = wait_for(api.get, audit["id"], timeout=120)
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["attempt"] == 2  # claimed once more, by the new worker, after the heartbeat went stale

    # the broker's late redelivery of the original message finds the audit finished and changes nothing
    create_celery(Settings(broker_url=state_of(api.app).settings.broker_url)).send_task(
        TASK_NAME, args=[audit["id"]]
    )
    deadline = time.monotonic() + 30
    while b"not claimed" not in second.log.read_bytes() and time.monotonic() < deadline:  # type: ignore[attr-defined]
        time.sleep(0.2)
    after = api.get(f"/v1/audits/{audit['id']}").json()
    assert (after["attempt"], after["finished_at"], after["result"]) == (
        2,
        done["finished_at"],
        done["result"],
    )

    # the same request, run from scratch on the new worker, gives the same seeded result
    again = api.post("/v1/audits", json=request).json()
    assert wait_for(api.get, again["id"], timeout=120)["result"] == done["result"]


def test_another_tenants_audit_does_not_wait_behind_a_backlog(
    stack: dict[str, str], start_worker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20 M3 on Celery: the broker holds at most ICLAUDIT_CELERY_TENANT_AUDITS (2) audits of a tenant;
    its backlog waits in the database. One worker, held by the flood's held audit: the flood's 12 more
    audits put one message in Redis, the other tenant's audit the next; once the model answers, the other
    tenant's audit starts after at most one of the flood's (all 12 before, with one FIFO queue)."""
    with serve_held_model(tmp_path) as held_model:
        stack["ICLAUDIT_MODELS_FILE"] = str(held_model.models_file)  # the worker's registry
        monkeypatch.setenv("ICLAUDIT_MODELS_FILE", str(held_model.models_file))  # the API's, in this process
        get_settings.cache_clear()
        env = {k.removeprefix("ICLAUDIT_").lower(): v for k, v in stack.items() if k.startswith("ICLAUDIT_")}
        settings = Settings(**{**env, "auth_enabled": True, "celery_tenant_audits": 2})
        with key_maker(settings.sqlalchemy_url) as make_key:
            flood = {"Authorization": f"Bearer {make_key('flood')}"}
            well = {"Authorization": f"Bearer {make_key('well')}"}
        start_worker("w1")
        try:
            with TestClient(create_app(settings)) as api:
                held = api.post("/v1/audits", json=held_iclinf(), headers=flood).json()
                held_model.wait_arrival()
                backlog = [
                    api.post("/v1/audits", json=bound_request(), headers=flood).json()["id"]
                    for _ in range(12)
                ]
                other = api.post("/v1/audits", json=bound_request(), headers=well).json()["id"]
                time.sleep(1.5)  # a release round or more: the flood has no room, nothing more is sent
                messages = redis.Redis.from_url(stack["ICLAUDIT_BROKER_URL"]).lrange("audits", 0, -1)
                queued = [json.loads(m)["headers"]["argsrepr"] for m in messages]
                names = {
                    held["id"]: "held",
                    other: "other",
                    **{a: f"flood{i}" for i, a in enumerate(backlog)},
                }
                assert sorted(names.get(q.strip("[]'\""), q) for q in queued) == ["flood0", "other"], queued
                held_model.open()
                assert (
                    wait_for(lambda p: api.get(p, headers=flood), held["id"], timeout=60)["state"] == "FAILED"
                )
                done = wait_for(lambda p: api.get(p, headers=well), other, timeout=60)
                flood_done = [wait_for(lambda p: api.get(p, headers=flood), i, timeout=120) for i in backlog]
        finally:
            get_settings.cache_clear()
    assert done["state"] == "SUCCEEDED" and {a["state"] for a in flood_done} == {"SUCCEEDED"}
    ahead = [a["id"] for a in flood_done if a["started_at"] < done["started_at"]]
    print(f"the other tenant's audit started after {len(ahead)} of the flood's 12 queued audits")
    assert len(ahead) <= 1, ahead
