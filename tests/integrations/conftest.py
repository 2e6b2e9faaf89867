"""Integration tests (issue 12): the real app over a migrated SQLite file or the session's PostgreSQL,
auth on, a fast integrations tick; a real HTTP webhook receiver on 127.0.0.1 that can go down and come
back; a real uvicorn server in a thread for concurrent clients."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from app.config import Settings
from app.main import create_app
from testkit.app_fixtures import app_client, app_settings, client, make_key  # noqa: F401 - fixtures
from testkit.servers import database_url, free_port, postgres_server, serve_in_thread  # noqa: F401 - fixtures


@dataclass
class Received:
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    """Records every POST; `down()` closes the port (connection refused), `up()` listens again."""

    port: int
    got: list[Received] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def up(self) -> None:
        got = self.got

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                got.append(Received({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def wait_for(self, n: int, timeout: float = 30.0) -> list[Received]:
        deadline = time.monotonic() + timeout
        while len(self.got) < n:
            if time.monotonic() > deadline:
                raise AssertionError(f"receiver got {len(self.got)} of {n} deliveries in {timeout}s")
            time.sleep(0.05)
        return self.got


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver(port=free_port())
    r.up()
    yield r
    r.down()


@pytest.fixture
def settings(database_url: str, tmp_path: Path, data_dir: Path, receiver: Receiver) -> Settings:  # noqa: F811
    return app_settings(
        database_url,
        tmp_path,
        data_dir,
        inline_workers=2,
        webhook_tick_seconds=0.1,
        webhook_backoff_seconds=0.2,
        webhook_allowlist=[f"http://127.0.0.1:{receiver.port}/"],
        schedule_min_interval_seconds=1,  # schedules firing every second or two
    )


@contextmanager
def live_server(settings: Settings) -> Iterator[str]:
    """The service itself under a real uvicorn."""
    with serve_in_thread(create_app(settings), "the service") as url:
        yield url
