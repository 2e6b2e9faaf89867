"""Bounded replies and bodies: what an audited target, a step of a multi-step target, a chat target or a
webhook receiver sends back is read up to a limit and no further, a templated body is capped before it is
sent, and the answers an audit stores for resume have a byte cap. Every target here is a real HTTP server
that streams far past the limit; the test process (the API, its audit worker and the targets) keeps its
RSS within +100 MB and the database within its cap."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from testkit.client import endpoint_request, wait_for
from testkit.servers import serve_in_thread

FLOOD = 400 * 2**20  # what each flooding server would send
CHUNK = b"x" * 2**16


class Flood:
    """A server whose every route streams FLOOD bytes (chunked, or with a Content-Length saying so), counting
    what it managed to send."""

    def __init__(self) -> None:
        self.sent = 0
        self.calls = 0
        self.lock = threading.Lock()

    def stream(self, sized: bool = False) -> StreamingResponse:
        def chunks() -> Iterator[bytes]:
            for _ in range(FLOOD // len(CHUNK)):
                with self.lock:
                    self.sent += len(CHUNK)
                yield CHUNK

        with self.lock:
            self.calls += 1
        headers = {"Content-Length": str(FLOOD)} if sized else None
        return StreamingResponse(chunks(), media_type="application/json", headers=headers)

    def app(self) -> FastAPI:
        api = FastAPI()

        @api.post("/chunked")
        async def chunked() -> StreamingResponse:
            return self.stream()

        @api.post("/sized")
        async def sized() -> StreamingResponse:
            return self.stream(sized=True)

        @api.post("/ok")
        async def ok() -> JSONResponse:
            return JSONResponse({"choices": [{"text": "1"}]})

        @api.post("/session")
        async def session() -> JSONResponse:
            return JSONResponse({"id": "s1"})

        @api.post("/v1/chat/completions")
        async def chat() -> StreamingResponse:
            return self.stream()

        @api.post("/hooks/flood")
        async def hook() -> StreamingResponse:
            return self.stream()

        return api


class Peak:
    """The peak RSS of this process and its children (the API, its audit worker, the servers) over a block,
    sampled every 50 ms, minus the value at its start."""

    def __init__(self) -> None:
        self.me = psutil.Process()
        self.before = self.peak = self.rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def rss(self) -> float:
        total = 0
        for p in [self.me, *self.me.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total / 2**20

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.rss())
            time.sleep(0.05)

    def __enter__(self) -> Peak:
        self.before = self.peak = self.rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth(self) -> float:
        return self.peak - self.before


def warm(client: Any, url: str) -> None:
    """A well-behaved endpoint audit first: the audit worker process is started and has loaded what an
    endpoint audit needs, so the RSS measured after it is the flood's."""
    submitted = client.post("/v1/audits", json=endpoint_request(url + "/ok"))
    assert submitted.status_code == 202, submitted.text
    assert wait_for(client.get, submitted.json()["id"], timeout=120)["state"] == "SUCCEEDED"


def failed_with(client: Any, body: dict) -> dict:
    submitted = client.post("/v1/audits", json=body)
    assert submitted.status_code == 202, submitted.text
    done = wait_for(client.get, submitted.json()["id"], timeout=120)
    assert done["state"] == "FAILED", done
    assert done["error"]["code"] == "AUDIT_ERROR", done["error"]
    return done["error"]


def test_endpoint_step_and_chat_replies_are_read_up_to_the_limit(app_client, make_key) -> None:
    flood = Flood()
    with (
        serve_in_thread(flood.app(), "the flooding target") as url,
        app_client(endpoint_allowlist=[url + "/"]) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        warm(client, url)
        with Peak() as peak:
            chunked = failed_with(client, endpoint_request(url + "/chunked"))
            sized = failed_with(client, endpoint_request(url + "/sized"))
            step = {"url": url + "/chunked", "save": {"sid": "$.id"}}
            stepped = failed_with(
                client, endpoint_request(url + "/session", steps=[{"url": url + "/session"}, step])
            )
            chat = failed_with(
                client,
                {
                    "kind": "mia",
                    "dataset": "synthetic_records",
                    "seed": 0,
                    "target": {"url": url + "/v1", "model": "app"},
                    "mechanism": {"name": "none", "shots_per_partition": 2},
                    "attack": {
                        "name": "likelihood",
                        "threat_model": "white_box",
                        "canaries": 2,
                        "contexts": 2,
                    },
                },
            )
    for error in (chunked, sized, stepped, chat):
        assert "ICLAUDIT_TARGET_MAX_REPLY_BYTES = 1048576" in error["message"], error
        assert "the rest was not read" in error["message"]
    assert url + "/chunked" in chunked["message"] and "Content-Length is 419,430,400" in sized["message"]
    assert flood.calls == 4
    # each refused reply stopped the server within a few socket buffers of the limit, not at 400 MB
    assert flood.sent < 4 * 16 * 2**20, flood.sent
    assert peak.growth < 100, f"RSS grew {peak.growth:.0f} MB"


def test_a_templated_body_is_capped_at_submit_and_before_it_is_sent(app_client, make_key) -> None:
    flood = Flood()
    with (
        serve_in_thread(flood.app(), "the target") as url,
        app_client(endpoint_allowlist=[url + "/"], target_max_body_bytes=8192) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        warm(client, url)
        calls = flood.calls
        with Peak() as peak:
            blown = endpoint_request(url + "/chunked", body={"prompt": "{context} " * 200_000})  # 2 MB
            refused = client.post("/v1/audits", json=blown)
            assert refused.status_code == 422, refused.text
            message = refused.json()["error"]["message"]
            assert "mechanism.endpoint.body" in message and "200000 × {context}" in message
            assert "above this service's 8,192 (ICLAUDIT_TARGET_MAX_BODY_BYTES)" in message
            smaller = endpoint_request(url + "/chunked", body={"prompt": "{context} " * 2000})
            planned = client.post("/v1/audits/plan", json=smaller)  # the plan checks it too
            assert planned.status_code == 422 and "2000 × {context}" in planned.text, planned.text
            # 20 copies pass the submit's floor (8 exemplars of at least 6 characters) but not the real records
            error = failed_with(
                client, endpoint_request(url + "/chunked", body={"prompt": "{context} " * 20})
            )
    assert "mechanism.endpoint.body: filled, it would be at least" in error["message"]
    assert "20 × {context}" in error["message"] and "ICLAUDIT_TARGET_MAX_BODY_BYTES" in error["message"]
    assert flood.calls == calls  # nothing was sent
    assert peak.growth < 100


def _db_bytes(tmp_path: Path) -> int:
    return sum(p.stat().st_size for p in tmp_path.glob("iclaudit.db*"))


def test_stored_answers_stop_at_the_audit_cap(app_client, make_key, settings, tmp_path: Path) -> None:
    from sqlalchemy import select

    from app.db.engine import make_engine, make_session_factory
    from app.db.models import TargetResponse
    from app.db.responses import stored_bytes

    cap = 2**20
    answer = "7" * 15_000
    api = FastAPI()
    calls = []

    @api.post("/")
    async def big(request: Request) -> JSONResponse:
        calls.append(1)
        return JSONResponse({"choices": [{"text": answer}]})

    with (
        serve_in_thread(api, "the target") as url,
        app_client(endpoint_allowlist=[url + "/"], target_max_stored_bytes=cap) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        before = _db_bytes(tmp_path)
        error = failed_with(client, endpoint_request(url + "/", trials=50))
        grown = _db_bytes(tmp_path) - before
    assert "ICLAUDIT_TARGET_MAX_STORED_BYTES" in error["message"] and "1,048,576 bytes" in error["message"]
    engine = make_engine(settings.sqlalchemy_url)
    try:
        with make_session_factory(engine)() as session:
            lineages = set(session.scalars(select(TargetResponse.lineage_id)))
            kept = sum(stored_bytes(session, lineage) for lineage in lineages)
    finally:
        engine.dispose()
    assert len(calls) == 100  # C1's 50 answers stored (750 kB), C0's 50 would pass the cap
    assert 0 < kept <= cap
    assert grown < cap + 2**20, f"the database grew {grown:,} bytes"


def test_a_webhook_reply_is_never_read(app_client, make_key, settings) -> None:
    from app.audit.kinds.registry import kind_module

    flood = Flood()
    with (
        serve_in_thread(flood.app(), "the receiver") as url,
        app_client(webhook_allowlist=[url + "/hooks"], webhook_tick_seconds=0.2) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        warmed = client.post("/v1/audits", json=kind_module("bound").EXAMPLE).json()  # the worker started
        wait_for(client.get, warmed["id"], timeout=60)
        peak = Peak().__enter__()
        hook = client.post("/v1/webhooks", json={"url": url + "/hooks/flood"}).json()
        audit = client.post("/v1/audits", json=kind_module("bound").EXAMPLE).json()
        wait_for(client.get, audit["id"], timeout=60)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            log = client.get(f"/v1/webhooks/{hook['id']}/deliveries").json()["deliveries"]
            if log and log[0]["state"] != "PENDING":
                break
            time.sleep(0.1)
        peak.__exit__()
    assert log[0]["state"] == "SUCCEEDED", log[0]
    assert flood.sent < 16 * 2**20, flood.sent
    assert peak.growth < 100
