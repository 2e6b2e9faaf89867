"""A real "internal" HTTP service on 127.0.0.1 for the SSRF tests: it records every path that reaches it.

/secret answers 200 with SECRET, /error 500 with SECRET, /redirect 302 to /secret; a path under /hooks/slow
answers after SLOW_SECONDS (a slow webhook receiver)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "internal-secret-7f3a"
SLOW_SECONDS = 3.0


class _Internal(BaseHTTPRequestHandler):
    hits: list[str]

    def _answer(self) -> None:
        self.hits.append(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        if self.path.startswith("/hooks/slow"):
            time.sleep(SLOW_SECONDS)
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{self.server.server_port}/secret")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        status = 500 if self.path.startswith("/error") else 200
        body = f'{{"answer": "{SECRET}", "choices": [{{"text": "{SECRET}"}}]}}'.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer

    def log_message(self, *args: object) -> None:
        pass


@contextmanager
def internal_server() -> Iterator[tuple[int, list[str]]]:
    """(port, paths hit) of a real server on 127.0.0.1."""
    hits: list[str] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Handler", (_Internal,), {"hits": hits}))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_port, hits
    finally:
        server.shutdown()
        server.server_close()
