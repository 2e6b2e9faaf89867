"""Service spine speed on the embedded default (SQLite file, inline executor, auth on), in process
through the ASGI app: request latencies, a `bound` audit end to end, and authentication with the
process's verified-key memo against scrypt on every request (the baseline, same run). Then the load
figures on real servers (bench/suites/api_load.py: the service against a bare FastAPI app under the same
uvicorn settings, open loop 300 and 1,000 req/s and closed loop 200, finished and running audits; the
stacks in ICLAUDIT_BENCH_STACKS, default the embedded one; the older phases with ICLAUDIT_BENCH_EXTRAS=1)."""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from fastapi.testclient import TestClient

from app.audit.kinds.registry import kind_module
from app.config import Settings
from app.db import keys
from app.main import create_app
from testkit.tenants import create_key

REPEATS = 200


def _median_ms(call: Callable[[], object], repeats: int = REPEATS) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return 1000 * statistics.median(times)


def _wait(client: TestClient, audit_id: str) -> None:
    while client.get(f"/v1/audits/{audit_id}").json()["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
        time.sleep(0.001)


def run() -> Iterator[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(state_dir=Path(tmp), auth_enabled=True, preload_models=False)
        key = create_key(settings.sqlalchemy_url, "bench", migrate=True)
        body = kind_module("bound").EXAMPLE
        with TestClient(create_app(settings)) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            audit_id = client.post("/v1/audits", json=body).json()["id"]
            _wait(client, audit_id)

            yield {
                "name": "get_audit_p50",
                "value": _median_ms(lambda: client.get(f"/v1/audits/{audit_id}")),
                "unit": "ms",
            }
            yield {
                "name": "list_audits_p50",
                "value": _median_ms(lambda: client.get("/v1/audits?page_size=50")),
                "unit": "ms",
            }

            start = time.perf_counter()
            for _ in range(50):
                _wait(client, client.post("/v1/audits", json=body).json()["id"])
            yield {
                "name": "bound_audit_end_to_end",
                "value": 1000 * (time.perf_counter() - start) / 50,
                "unit": "ms",
            }

            memo = _median_ms(lambda: client.get("/v1/audits?page_size=1"), 50)

            def cold() -> None:
                keys._verified.clear()
                client.get("/v1/audits?page_size=1")

            scrypt_each_time = _median_ms(cold, 50)
            yield {
                "name": "authenticated_request_p50",
                "value": memo,
                "unit": "ms",
                "baseline": scrypt_each_time,
                "ratio": scrypt_each_time / memo,
            }

    from bench.suites import api_load

    yield from api_load.run()
