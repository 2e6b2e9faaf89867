"""The real stack: PostgreSQL + Redis + two `iclaudit worker` processes. A sweep submitted twice with one
Idempotency-Key is one sweep, its children are fanned out over both workers (one message each), and the
webhooks are delivered by the workers' `iclaudit.deliver_webhook` task, each once, signed."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from integrations.conftest import Receiver
from integrations.test_sweeps import mia_base, wait_sweep
from standardwebhooks import Webhook

from app.config import Settings
from app.main import create_app
from testkit.servers import fresh_database, redis_server  # noqa: F401 - fixture
from testkit.workers import celery_env, start_worker, wait_ready

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def start_workers(n: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    """`n` workers started together; returns once each says it is ready."""
    procs = [start_worker(env, logs / f"worker{i}.log") for i in range(n)]
    wait_ready(procs)
    return procs


def test_sweep_and_webhooks_on_the_celery_stack(
    postgres_server,
    redis_server,  # noqa: F811 - the fixture
    tmp_path: Path,
    data_dir: Path,
    receiver: Receiver,
) -> None:
    redis.Redis.from_url(redis_server.url).flushall()
    env = celery_env(fresh_database("postgres", tmp_path), redis_server.url, data_dir, tmp_path) | {
        "ICLAUDIT_PRELOAD_MODELS": "true",
        "ICLAUDIT_DEFAULT_MODEL": "oracle",
        "ICLAUDIT_WEBHOOK_TICK_SECONDS": "0.2",
        "ICLAUDIT_WEBHOOK_ALLOWLIST": f'["http://127.0.0.1:{receiver.port}/"]',
        "HF_HUB_OFFLINE": "1",
    }
    workers = start_workers(2, env, tmp_path)
    settings = Settings(
        **{k.removeprefix("ICLAUDIT_").lower(): v for k, v in env.items() if k.startswith("ICLAUDIT_")}
        | {"webhook_allowlist": [f"http://127.0.0.1:{receiver.port}/"]}
    )
    try:
        with TestClient(create_app(settings)) as api:
            hook = api.post("/v1/webhooks", json={"url": receiver.url}).json()
            body = {"base": mia_base(), "grid": {"epsilon": [1, 2, 4, 8]}, "labels": {"stack": "celery"}}
            key = {"Idempotency-Key": "celery-sweep"}
            first = api.post("/v1/sweeps", json=body, headers=key)
            again = api.post("/v1/sweeps", json=body, headers=key)
            assert (first.status_code, again.status_code) == (202, 202)
            assert again.json()["id"] == first.json()["id"] and again.headers["Idempotent-Replayed"] == "true"
            done = wait_sweep(api, first.json()["id"], timeout=120)
            assert done["state"] == "SUCCEEDED" and done["progress"]["counts"] == {"SUCCEEDED": 4}
            assert len(api.get("/v1/audits").json()["audits"]) == 4
            got = receiver.wait_for(5, timeout=60)
            time.sleep(1.0)
            assert len(receiver.got) == 5
    finally:
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.wait(timeout=30)
    events = Counter(Webhook(hook["secret"]).verify(m.body, m.headers)["type"] for m in got)
    assert events == {"audit.succeeded": 4, "sweep.completed": 1}
    logs = [p.log.read_text() for p in workers]  # type: ignore[attr-defined]
    claimed = [log.count("claimed, attempt 1") for log in logs]
    assert sum(claimed) == 4 and all(claimed), claimed  # one message per child, both workers took some
    assert sum(log.count("iclaudit.deliver_webhook") for log in logs) >= 5  # delivered by the workers
