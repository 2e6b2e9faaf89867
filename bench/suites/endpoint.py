"""Endpoint audits: the wall time of one `http_endpoint` mia audit sent one call at a time against the same
audit with `endpoint.max_concurrency` = 4, side by side, on a local target with a fixed latency.

Target: FastAPI + uvicorn on 127.0.0.1 in this process, randomized response on "the canary is in the
context" at ε = 1, each answer after LATENCY seconds (asyncio.sleep: calls overlap at the target) and
seeded by the request body, which holds `{trial}`, so both runs get the same answer for each trial. The
audit is examples/mia-http-endpoint.json at TRIALS trials a context (2·TRIALS calls). Rows: both wall
times, the ratio, and whether the two results are identical (they must be: concurrency changes only the
wall time). `python bench/run.py endpoint`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request  # module level: the route's annotations resolve here

from testkit.servers import serve_in_thread

LATENCY = 0.05  # seconds each answer takes at the target
TRIALS = 100  # trials a context: 200 calls a run
CONCURRENCY = 4
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mia-http-endpoint.json"


def _target(latency: float, epsilon: float = 1.0) -> FastAPI:
    from app.audit.icl.prompts import CONTEXTLEAK_CANARY

    keep = float(np.exp(epsilon) / (1.0 + np.exp(epsilon)))
    api = FastAPI()

    @api.post("/")
    async def answer(request: Request) -> dict:
        raw = await request.body()
        body = json.loads(raw)
        await asyncio.sleep(latency)
        seed = int(hashlib.sha256(raw).hexdigest()[:15], 16)
        truthful = bool(np.random.default_rng(seed).random() < keep)
        present = any(CONTEXTLEAK_CANARY in e for e in body.get("context", []))
        return {"choices": [{"text": "1" if present == truthful else "0"}]}

    return api


def _audit(url: str, concurrency: int) -> tuple[float, dict]:
    from app.audit.kinds import mia
    from app.audit.runtime import no_progress
    from app.audit.standalone import local_context

    body = json.loads(EXAMPLE.read_text())
    body["mechanism"]["endpoint"].update(
        url=url,
        body={"context": "{context}", "query": "{query}", "trial": "{trial}"},
        max_concurrency=concurrency,
    )
    request = mia.Request.model_validate(body | {"trials": TRIALS, "seed": 0})
    ctx = local_context(progress=no_progress)
    start = time.perf_counter()
    result = mia.run(request, ctx).stored()
    return time.perf_counter() - start, result


def run() -> Iterator[dict]:
    with serve_in_thread(_target(LATENCY), "the bench target") as base:
        url = f"{base}/"
        _audit(url, 1)  # warm-up: the dataset, the imports
        sequential, one = _audit(url, 1)
        concurrent, four = _audit(url, CONCURRENCY)
    keys = ("black_box", "verdict", "epsilon_lower", "evidence", "endpoint_calls")
    note = f"{2 * TRIALS} calls, target latency {LATENCY * 1000:g} ms"
    yield {"name": "endpoint_audit_sequential", "value": round(sequential, 3), "unit": "s", "note": note}
    yield {
        "name": f"endpoint_audit_max_concurrency_{CONCURRENCY}",
        "value": round(concurrent, 3),
        "unit": "s",
        "baseline": round(sequential, 3),
        "ratio": round(sequential / concurrent, 2),
        "note": note,
    }
    yield {
        "name": "endpoint_results_identical",
        "value": all(one.get(k) == four.get(k) for k in keys),
        "unit": "bool",
    }
