"""A held model for tests that must hold an audit RUNNING: an OpenAI-compatible HTTP server (registered as
model `gated` through ICLAUDIT_MODELS_FILE) whose every request waits until the test calls `open()`, then
is refused (400), so the audit holding it ends FAILED. The audit is held by an event, never by its size."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


@dataclass
class HeldModel:
    url: str
    models_file: Path
    opened: threading.Event = field(default_factory=threading.Event)
    arrivals: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def wait_arrival(self, timeout: float = 60.0) -> None:
        """Until one more model request is held (an audit RUNNING in its model call)."""
        if not self.arrivals.acquire(timeout=timeout):
            raise AssertionError(f"no audit reached the held model within {timeout}s")

    def open(self) -> None:
        self.opened.set()


def held_iclinf(seed: int = 0) -> dict[str, Any]:
    """An iclinf audit whose first model call waits until `open()`."""
    from app.audit.kinds.registry import kind_module

    return {**kind_module("iclinf").EXAMPLE, "model": "gated", "seed": seed}


@contextmanager
def serve_held_model(workdir: Path) -> Iterator[HeldModel]:
    held: HeldModel | None = None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length") or 0))
            assert held is not None
            held.arrivals.release()
            held.opened.wait(300)
            body = json.dumps({"error": {"message": "the test's held model refuses every request"}}).encode()
            try:
                self.send_response(400)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except OSError:  # the process that asked was killed by the test
                pass

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    httpd.daemon_threads = True
    url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    models_file = workdir / "gated-models.json"
    entry = {
        "name": "gated",
        "engine": "openai",
        "base_url": url,
        "model": "gated",
        "max_retries": 0,
        "max_concurrency": 1,
    }
    models_file.write_text(json.dumps([entry]))
    held = HeldModel(url=url, models_file=models_file)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield held
    finally:
        held.open()
        httpd.shutdown()
        httpd.server_close()
