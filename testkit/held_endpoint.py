"""An endpoint that holds an audit RUNNING for exactly as long as a test needs (see `HeldEndpoint`)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from testkit.servers import free_port


class HeldEndpoint:
    """A loopback endpoint that holds an audit RUNNING, or lets it through a given number of calls at a
    time, by events, never by a trial count.

    An `http_endpoint` audit of `url` (`request`; the server must allow it: `allowlist_env`, or
    `endpoint_allowlist=[url]` in process) makes real calls, each of which waits here until `allow` counts
    it in or `release` lets every call through; `wait_held(n)` returns once call n arrived, so the audit is
    RUNNING and its worker waits here, however fast or busy the machine and whatever the executor.
    Leaving the `with` block releases every call. One endpoint may serve a module's server: `rearm` before
    each held audit.

        with HeldEndpoint() as held, app_client(endpoint_allowlist=[held.url]) as client:
            audit = client.post("/v1/audits", json=held.request()).json()
            held.wait_held()                      # the audit is RUNNING and holds its worker
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._arrived = 0
        self._allowed = 0
        self._open = False
        held = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with held._cond:
                    held._arrived += 1
                    mine = held._arrived
                    held._cond.notify_all()
                    held._cond.wait_for(lambda: held._open or mine <= held._allowed, timeout=600)
                body = json.dumps({"answer": "1"}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:  # the server that asked has stopped
                    pass

            def log_message(self, *_: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def allowlist_env(self) -> dict[str, str]:
        return {"ICLAUDIT_ENDPOINT_ALLOWLIST": json.dumps([self.url])}

    def request(self, trials: int = 5, seed: int = 0) -> dict[str, Any]:
        """A real membership audit of this endpoint (black box): `trials` calls per context, in chunks of
        `http_endpoint`'s call_batch (100) calls per context, each chunk followed by a progress report."""
        return {
            "kind": "mia",
            "dataset": "ag_news",
            "seed": seed,
            "epsilon": 1.0,
            "estimator": "direct",
            "trials": trials,
            "mechanism": {
                "name": "http_endpoint",
                "endpoint": {"url": self.url, "timeout_s": 300, "retries": 0},
            },
            "attack": {"name": "canary_prompt", "threat_model": "black_box"},
        }

    def wait_held(self, calls: int = 1, timeout: float = 120.0) -> None:
        """Until call number `calls` (since `rearm`) arrived: every call before it was let through."""
        with self._cond:
            arrived = self._cond.wait_for(lambda: self._arrived >= calls, timeout=timeout)
            assert arrived, f"{self._arrived} calls reached the endpoint within {timeout} s, not {calls}"

    def allow(self, calls: int) -> None:
        """Let `calls` more calls through (those waiting first), then hold again."""
        with self._cond:
            self._allowed += calls
            self._cond.notify_all()

    def release(self) -> None:
        """Let every call through, waiting or to come, until `rearm`."""
        with self._cond:
            self._open = True
            self._cond.notify_all()

    def rearm(self) -> None:
        """Hold the next audit's calls again, counted from zero."""
        with self._cond:
            self._arrived = self._allowed = 0
            self._open = False

    def __enter__(self) -> HeldEndpoint:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.release()
        self._server.shutdown()
        self._server.server_close()
