"""Integrations on real servers: the wall time of a 16-point sweep on PostgreSQL + Redis with
1 and then 2 `iclaudit worker` processes (Celery, one message per child), and a signed webhook delivered
after a 30 s receiver outage with the default backoff (embedded default, SQLite).

Sweep workload: mia audits of private voting on the oracle engine (bootstrap, 200,000 trials each), grid
epsilon [1, 2, 4, 8] × mechanism.partitions [2, 4] × 2 seeds = 16 child audits.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import redis
from fastapi.testclient import TestClient
from standardwebhooks import Webhook

from app.config import Settings
from app.db.migrate import upgrade
from app.main import create_app
from testkit.servers import (  # the tests' real-server helpers
    create_database,
    free_port,
    start_postgres,
    start_redis,
)
from testkit.workers import celery_env, start_worker, wait_ready

ROOT = Path(__file__).resolve().parents[2]
DATA_DIR = ROOT.parent / "shared" / "datasets"
OUTAGE_SECONDS = float(os.environ.get("ICLAUDIT_BENCH_OUTAGE_SECONDS", "30"))
SWEEP = {
    "base": {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "mechanism": {"name": "private_voting", "partitions": 4, "shots_per_partition": 1},
        "epsilon": 1.0,
        "attack": {"name": "inquiry", "threat_model": "black_box"},
        "llm_calls": 100,
        "trials": 200_000,
    },
    "grid": {"epsilon": [1, 2, 4, 8], "mechanism.partitions": [2, 4]},
    "seeds": 2,
}


def _workers(n: int, env: dict[str, str], workdir: Path) -> list[subprocess.Popen[bytes]]:
    procs = [start_worker(env, workdir / f"worker{i}.log") for i in range(n)]
    wait_ready(procs)
    return procs


def _sweep_seconds(n_workers: int, postgres_url: str, broker_url: str, workdir: Path) -> float:
    redis.Redis.from_url(broker_url).flushall()
    database = create_database(postgres_url, f"iclaudit_sweep_{n_workers}")
    upgrade(database)
    env = celery_env(database, broker_url, DATA_DIR, workdir) | {
        "ICLAUDIT_DEFAULT_MODEL": "oracle",
        "HF_HUB_OFFLINE": "1",
    }
    procs = _workers(n_workers, env, workdir)
    settings = Settings(
        database_url=database, broker_url=broker_url, executor="celery", data_dir=DATA_DIR, state_dir=workdir,
        auth_enabled=False, preload_models=False,
    )  # fmt: skip
    try:
        with TestClient(create_app(settings)) as api:
            start = time.perf_counter()
            sweep = api.post("/v1/sweeps", json=SWEEP).json()
            while api.get(f"/v1/sweeps/{sweep['id']}").json()["state"] not in ("SUCCEEDED", "FAILED"):
                time.sleep(0.1)
            elapsed = time.perf_counter() - start
            assert api.get(f"/v1/sweeps/{sweep['id']}").json()["state"] == "SUCCEEDED"
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
    return elapsed


def _receiver(port: int, got: list[tuple[dict[str, str], bytes, float]]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body, time.monotonic()))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _outage(workdir: Path) -> dict[str, float]:
    """Receiver down for OUTAGE_SECONDS while an audit finishes; default backoff (5 s, doubling)."""
    port = free_port()
    settings = Settings(
        state_dir=workdir, data_dir=DATA_DIR, auth_enabled=False, preload_models=False,
        webhook_allowlist=[f"http://127.0.0.1:{port}/"],
    )  # fmt: skip
    upgrade(settings.sqlalchemy_url)
    got: list[tuple[dict[str, str], bytes, float]] = []
    with TestClient(create_app(settings)) as api:
        hook = api.post("/v1/webhooks", json={"url": f"http://127.0.0.1:{port}/hook"}).json()
        down_at = time.monotonic()
        audit = api.post(
            "/v1/audits", json={"kind": "bound", "counts": {"tp": 60, "fn": 40, "fp": 40, "tn": 60}}
        )
        time.sleep(OUTAGE_SECONDS)
        server, up_at = _receiver(port, got), time.monotonic()
        while not got:
            time.sleep(0.05)
        server.shutdown()
        headers, body, at = got[0]
        payload = Webhook(hook["secret"]).verify(body, headers)
        log = api.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["deliveries"][0]
    assert payload["data"]["id"] == audit.json()["id"] and log["state"] == "SUCCEEDED"
    return {
        "outage_s": up_at - down_at,
        "delivered_after_up_s": at - up_at,
        "attempts": log["attempts"],
        "received": len(got),
    }


def run() -> Iterator[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        postgres, broker = start_postgres(), start_redis()
        try:
            one = _sweep_seconds(1, postgres.url, broker.url, workdir)
            yield {"name": "sweep_16_points_1_worker", "value": round(one, 2), "unit": "s"}
            two = _sweep_seconds(2, postgres.url, broker.url, workdir)
            yield {
                "name": "sweep_16_points_2_workers",
                "value": round(two, 2),
                "unit": "s",
                "baseline": round(one, 2),
                "ratio": round(one / two, 2),
            }
        finally:
            broker.stop()
            postgres.stop()
        outage = _outage(workdir)
        yield {
            "name": "webhook_after_outage",
            "value": round(outage["delivered_after_up_s"], 2),
            "unit": "s",
            **{k: round(v, 2) for k, v in outage.items()},
        }


if __name__ == "__main__":
    for row in run():
        print(json.dumps(row), flush=True)
