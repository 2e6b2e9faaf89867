"""A gated endpoint: hold an audit RUNNING for exactly as long as a test needs.

An `http_endpoint` audit against `Gate.url` makes real HTTP calls to a loopback server whose every answer
waits until the test calls `release()`. So the audit is claimed (RUNNING), its worker is busy, and an
audit submitted after it stays PENDING, however fast or busy the machine is and whether the executor
runs audits in threads, processes or Celery workers. No trial count stands in for a hold.

    with Gate() as gate, app_client(endpoint_allowlist=[gate.url]) as client:
        held = client.post("/v1/audits", json=gate.request()).json()
        gate.wait_entered()                       # the audit is RUNNING and holds its worker
        ...
    # leaving the block releases every call
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testkit.servers import free_port


class Gate:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                gate.entered.set()
                gate.opened.wait(timeout=600)
                body = json.dumps({"answer": "1"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def request(self, trials: int = 5) -> dict[str, Any]:
        """A real membership audit of this endpoint (black box, a few calls once released)."""
        return {
            "kind": "mia",
            "dataset": "ag_news",
            "seed": 0,
            "epsilon": 1.0,
            "estimator": "direct",
            "trials": trials,
            "mechanism": {
                "name": "http_endpoint",
                "endpoint": {"url": self.url, "timeout_s": 300, "retries": 0},
            },
            "attack": {"name": "canary_prompt", "threat_model": "black_box"},
        }

    def wait_entered(self, timeout: float = 60.0) -> None:
        """Until the first call arrived: the audit is RUNNING and its worker waits here."""
        assert self.entered.wait(timeout), f"no call reached the gate within {timeout} s"

    def release(self) -> None:
        self.opened.set()

    def rearm(self) -> None:
        """Hold the next audit's calls again (a gate kept for a module's server, one held audit per test)."""
        self.entered.clear()
        self.opened.clear()

    def __enter__(self) -> Gate:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
