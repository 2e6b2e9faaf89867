"""iclaudit.client against a real HTTP server on loopback that answers 429/503 first: retries wait at least
what Retry-After asks, keep one Idempotency-Key across the retries of a POST, and give up with one clear
error; a POST the server does not de-duplicate is retried only when nothing can have been written. And the
light distribution (clients/python): installed alone into an empty venv, it runs an audit on a live server."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest

import iclaudit.client as client_module
from app.config import Settings
from app.main import create_app
from iclaudit.client import ApiError, IclauditClient, ServiceUnreachable, retry_after_seconds
from testkit.client import bound_request
from testkit.scripts import load_script
from testkit.servers import free_port, fresh_database, serve_in_thread
from testkit.tenants import create_key

ROOT = Path(__file__).resolve().parents[2]

AUDIT = {
    "id": "a" * 32,
    "kind": "bound",
    "state": "SUCCEEDED",
    "progress": {"stage": "succeeded", "fraction": 1.0, "eta_seconds": None, "message": ""},
    "result": {"tpr": 0.6, "fpr": 0.375, "mu_lower": 0.49, "epsilon_empirical": 1.96},
}


class Flaky(BaseHTTPRequestHandler):
    """Answers POSTs from `script` (status, headers) while it lasts, then 202 with AUDIT."""

    script: ClassVar[list[tuple[int, dict[str, str]]]] = []
    seen: ClassVar[list[tuple[float, str, str | None]]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Flaky.seen.append((time.monotonic(), self.path, self.headers.get("Idempotency-Key")))
        status, headers = Flaky.script.pop(0) if Flaky.script else (202, {})
        body = json.dumps(AUDIT if status < 400 else {"error": {"message": "slow down", "details": []}})
        self.send_response(status)
        for key, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def flaky() -> Iterator[str]:
    Flaky.script, Flaky.seen = [], []
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Flaky)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_retries_honour_retry_after_and_keep_the_idempotency_key(flaky: str) -> None:
    Flaky.script = [(429, {"Retry-After": "1"}), (503, {})]
    with IclauditClient(flaky, backoff=0.05, max_backoff=0.1) as client:
        audit = client.submit({"kind": "bound"})
    assert audit.id == AUDIT["id"] and audit.result is not None and audit.result.kind == "bound"
    (t0, _, k0), (t1, _, k1), (t2, _, k2) = Flaky.seen
    assert t1 - t0 >= 1.0  # Retry-After: 1 beats the 0.05 s back-off
    assert t2 - t1 < 1.0
    assert k0 and k0 == k1 == k2  # one key for all attempts: a retried submit is one audit


def test_gives_up_with_the_last_answer_and_on_a_dead_port(flaky: str) -> None:
    Flaky.script = [(503, {})] * 3
    with (
        IclauditClient(flaky, retries=2, backoff=0.01, max_backoff=0.02) as client,
        pytest.raises(ApiError) as err,
    ):
        client.submit({"kind": "bound"}, idempotency_key="k-1")
    assert err.value.status == 503 and err.value.message == "slow down"
    assert [k for _, _, k in Flaky.seen] == ["k-1"] * 3
    dead = IclauditClient(f"http://127.0.0.1:{free_port()}", retries=1, backoff=0.01)
    with dead, pytest.raises(ServiceUnreachable, match="cannot reach"):
        dead.get("x")


def test_a_post_the_server_does_not_deduplicate_is_retried_only_when_nothing_was_written(flaky: str) -> None:
    Flaky.script = [(503, {}), (502, {})]  # 503: refused before any write; 502: a proxy, it may have run
    with (
        IclauditClient(flaky, backoff=0.01, max_backoff=0.02) as client,
        pytest.raises(ApiError) as err,
    ):
        client.request("POST", "/v1/schedules", json={}, replay_safe=False)
    assert err.value.status == 502 and [p for _, p, _ in Flaky.seen] == ["/v1/schedules"] * 2
    Flaky.seen = []
    with IclauditClient(flaky, backoff=0.01, max_backoff=0.02) as client:  # a submit is replay-safe
        Flaky.script = [(502, {})]
        assert client.submit({"kind": "bound"}).id == AUDIT["id"]
    assert len(Flaky.seen) == 2


def test_retry_after_as_seconds_or_http_date() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert retry_after_seconds("7") == 7.0
    assert retry_after_seconds(format_datetime(now + timedelta(seconds=30), usegmt=True), now=now) == 30.0
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_the_clients_terminal_states_are_the_servers() -> None:
    from app.db.constants import TERMINAL_STATES

    assert client_module.TERMINAL_STATES == TERMINAL_STATES and client_module.TYPED


def _load_client_size() -> Any:
    return load_script("scripts/client_size.py")


SERVER_STACK = {
    "fastapi",
    "uvicorn",
    "sqlalchemy",
    "alembic",
    "celery",
    "redis",
    "torch",
    "transformers",
    "numpy",
}
LIGHT_SCRIPT = """
import json, sys
from iclaudit.client import TYPED, IclauditClient

url, key, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
with IclauditClient(url, api_key=key) as client:
    audit = client.wait(client.submit(body).id, timeout=120)
    result = client.result(audit.id)
    page = client.list(kind="bound")
print(json.dumps({"typed": TYPED, "id": audit.id, "state": audit.state, "outcome": audit.outcome,
                  "headline": audit.headline, "epsilon_lower": result.epsilon_lower,
                  "listed": [a.id for a in page.audits]}))
"""


def test_light_client_installs_alone_and_runs_an_audit(tmp_path: Path, data_dir: Path) -> None:
    """`pip install ./clients/python` into an empty venv (from the package index) brings httpx and pydantic
    and nothing of the server; the client then runs an audit against a live server (issue 21). Sizes:
    docs/results/client.md (scripts/client_size.py, the same install)."""
    client_size = _load_client_size()
    light = client_size.install_light(tmp_path / "venv")
    installed = set(light["dists"])
    assert {"iclaudit-client", "httpx", "pydantic"} <= installed
    assert not installed & SERVER_STACK, installed & SERVER_STACK
    light_bytes = sum(size for _, size in light["dists"].values())
    full_bytes = sum(size for _, size in client_size.full_install().values())
    assert light_bytes < 0.05 * full_bytes, (light_bytes, full_bytes)

    settings = Settings(
        database_url=fresh_database("sqlite", tmp_path),
        state_dir=tmp_path,
        data_dir=data_dir,
        executor="inline",
        auth_enabled=True,
        preload_models=False,
    )
    key = create_key(settings.sqlalchemy_url, "light")
    with serve_in_thread(create_app(settings), "the service") as url:
        out = subprocess.run(
            [str(light["python"]), "-c", LIGHT_SCRIPT, url, key, json.dumps(bound_request())],
            capture_output=True,
            text=True,
            timeout=180,
            cwd=tmp_path,  # not the checkout: only the installed client is importable
        )
        assert out.returncode == 0, out.stderr[-3000:]
        seen = json.loads(out.stdout)
        with IclauditClient(url, api_key=key) as typed:  # the server's distribution, typed
            audit = typed.get(seen["id"])
        assert seen["typed"] is False and seen["state"] == "SUCCEEDED" == audit.state
        assert (seen["outcome"], seen["headline"]) == (audit.outcome, audit.headline) and audit.outcome
        assert seen["epsilon_lower"] == audit.result.epsilon_lower and seen["listed"] == [audit.id]  # type: ignore[union-attr]
