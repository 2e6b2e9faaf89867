"""The openai engine's HTTP client against a real local HTTP server that fails on purpose:
retries with backoff on 429/5xx, no retry on other 4xx, timeouts, bounded concurrency."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from app.engines.openai_engine import JsonClient, OpenAIServerError


class _Flaky(BaseHTTPRequestHandler):
    script: ClassVar[list[int]] = []  # status codes to answer, in order; then 200
    seen: ClassVar[list[float]] = []
    in_flight = 0
    max_in_flight = 0
    lock = threading.Lock()
    delay_s = 0.0

    def do_POST(self) -> None:
        cls = type(self)
        with cls.lock:
            cls.seen.append(time.monotonic())
            status = cls.script.pop(0) if cls.script else 200
            cls.in_flight += 1
            cls.max_in_flight = max(cls.max_in_flight, cls.in_flight)
        try:
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            time.sleep(cls.delay_s)
        finally:  # no longer in flight before the answer goes out: the client's next request may follow it
            with cls.lock:
                cls.in_flight -= 1
        payload = json.dumps({"echo": body} if status == 200 else {"error": "busy"}).encode()
        self.send_response(status)
        if status == 429:
            self.send_header("retry-after", "0")
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Flaky.script, _Flaky.seen, _Flaky.delay_s = [], [], 0.0
    _Flaky.in_flight = _Flaky.max_in_flight = 0
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()
    httpd.server_close()
    deadline = time.monotonic() + 10  # a timed-out request's handler still sleeps: let it end here
    while _Flaky.in_flight and time.monotonic() < deadline:
        time.sleep(0.01)


def test_retries_429_and_5xx_with_exponential_backoff(server: str) -> None:
    _Flaky.script = [429, 503, 500]
    client = JsonClient(server, max_retries=4, backoff_s=0.05)
    assert client.post("/completions", {"n": 1}) == {"echo": {"n": 1}}
    gaps = [b - a for a, b in zip(_Flaky.seen, _Flaky.seen[1:], strict=False)]
    assert len(_Flaky.seen) == 4
    assert gaps[0] >= 0.05 and gaps[1] >= 0.1 and gaps[2] >= 0.2


def test_gives_up_after_max_retries_and_does_not_retry_client_errors(server: str) -> None:
    _Flaky.script = [503] * 10
    with pytest.raises(OpenAIServerError, match="HTTP 503"):
        JsonClient(server, max_retries=2, backoff_s=0.01).post("/completions", {})
    assert len(_Flaky.seen) == 3
    _Flaky.script, _Flaky.seen = [400], []
    with pytest.raises(OpenAIServerError, match="HTTP 400"):
        JsonClient(server, max_retries=5, backoff_s=0.01).post("/completions", {})
    assert len(_Flaky.seen) == 1


def test_timeout_is_reported(server: str) -> None:
    _Flaky.delay_s = 1.0
    with pytest.raises(OpenAIServerError, match="Timeout"):
        JsonClient(server, timeout_s=0.2, max_retries=1, backoff_s=0.01).post("/completions", {})


def test_concurrency_is_bounded(server: str) -> None:
    _Flaky.delay_s = 0.1
    client = JsonClient(server, max_concurrency=3)
    out = client.post_many("/completions", [{"i": i} for i in range(9)])
    assert [o["echo"]["i"] for o in out] == list(range(9))
    assert 1 < _Flaky.max_in_flight <= 3
