"""The real stack: PostgreSQL + Redis + two `iclaudit worker` processes. A sweep submitted twice with one
Idempotency-Key is one sweep, its children are fanned out over both workers (one message each), and the
webhooks are delivered by the workers' `iclaudit.deliver_webhook` task, each once, signed."""

from __future__ import annotations

import os
import signal
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
from testkit.servers import _die_with_parent, fresh_database, redis_server  # noqa: F401 - fixture

pytestmark = [pytest.mark.postgres, pytest.mark.redis]


def start_workers(n: int, env: dict[str, str], logs: Path) -> list[subprocess.Popen[bytes]]:
    """`n` workers started together; returns once each says it is ready."""
    import sys

    binary = Path(sys.executable).parent / "iclaudit"
    procs = []
    for i in range(n):
        log = logs / f"worker{i}.log"
        procs.append(
            subprocess.Popen(
                [str(binary), "worker", "--loglevel", "INFO"],
                env={**os.environ, **env},
                stdout=log.open("wb"),
                stderr=subprocess.STDOUT,
                preexec_fn=lambda: _die_with_parent(signal.SIGKILL),
            )
        )
        procs[-1].log = log  # type: ignore[attr-defined]
    deadline = time.monotonic() + 120
    for proc in procs:
        while b" ready." not in proc.log.read_bytes():  # type: ignore[attr-defined]
            assert proc.poll() is None and time.monotonic() < deadline, proc.log.read_text()[-3000:]  # type: ignore[attr-defined]
            time.sleep(0.1)
    return procs


def test_sweep_and_webhooks_on_the_celery_stack(
    postgres_server,
    redis_server,  # noqa: F811 - the fixture
    tmp_path: Path,
    data_dir: Path,
    receiver: Receiver,
) -> None:
    redis.Redis.from_url(redis_server.url).flushall()
    env = {
        "ICLAUDIT_DATABASE_URL": fresh_database("postgres", tmp_path),
        "ICLAUDIT_BROKER_URL": redis_server.url,
        "ICLAUDIT_EXECUTOR": "celery",
        "ICLAUDIT_DATA_DIR": str(data_dir),
        "ICLAUDIT_STATE_DIR": str(tmp_path),
        "ICLAUDIT_AUTH_ENABLED": "false",
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
