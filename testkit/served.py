"""Helpers of the browser tests: a real `iclaudit serve` (uvicorn, SQLite, inline executor, auth on) and Debian's
headless Chromium driven by Playwright (`executable_path`, never `playwright install`), offline: every
request that is not to the server is aborted, so a page that needs a CDN fails here."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from testkit.servers import _die_with_parent, free_port
from testkit.tenants import create_key

ICLAUDIT = Path(sys.executable).parent / "iclaudit"
CHROMIUM = os.environ.get("ICLAUDIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _example(name: str, **changes: Any) -> dict[str, Any]:
    return {**json.loads((EXAMPLES / name).read_text()), **changes}


# A real request for each outcome of the verdict, on the oracle engine (about a second each).
VERDICT_REQUESTS = {
    "leak": _example("likelihood-oracle-records.json"),
    "consistent": _example("mia-oracle-eps1.json"),
    "violation": _example("mia-oracle-bug-noise-divided-by-t.json"),
    "inconclusive": _example("mia-oracle-eps1.json", trials=25, epsilon=2),
}

# Worker processes of the browser tests' server (ICLAUDIT_INLINE_WORKERS): a test that must keep an audit PENDING
# holds that many at the held endpoint.
INLINE_WORKERS = 2


@dataclass
class Served:
    url: str
    alice: str
    bob: str
    log: Path
    workers: int = INLINE_WORKERS

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def serve(
    state: Path, *, auth: bool, extra_env: dict[str, str] | None = None, ready_within: float = 90.0
) -> tuple[subprocess.Popen, str, dict]:
    """`iclaudit migrate` then `iclaudit serve` on a free port in `state`; returns (process, url, env). A
    server not ready within `ready_within` seconds is stopped and the test fails with its log."""
    env = {
        **os.environ,
        "ICLAUDIT_STATE_DIR": str(state),
        "ICLAUDIT_AUTH_ENABLED": "true" if auth else "false",
        "ICLAUDIT_PRELOAD_MODELS": "false",
        "HF_HUB_OFFLINE": "1",
        **(extra_env or {}),
    }
    env.pop("ICLAUDIT_DATABASE_URL", None)
    from app.db.migrate import upgrade

    upgrade(f"sqlite:///{state / 'iclaudit.db'}")  # in-process: a CLI start costs seconds here
    proc, port = start_serve(state, env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + ready_within
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url, env
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(proc)
            raise AssertionError(f"not ready within {ready_within:g} s: " + (state / "serve.log").read_text())
        time.sleep(0.1)


def start_serve(state: Path, env: dict[str, str], *options: str) -> tuple[subprocess.Popen, int]:
    """`iclaudit serve` with `options` on a free port (returned), `env` its whole environment, `state` its
    directory and where serve.log is written; it gets SIGTERM when this process dies."""
    port = free_port()
    proc = subprocess.Popen(
        [str(ICLAUDIT), "serve", "--port", str(port), *options],
        env=env,
        cwd=state,
        stdout=(state / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: _die_with_parent(signal.SIGTERM),
    )
    return proc, port


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def make_key(state: Path, tenant: str) -> str:
    """A key for `tenant` in the server's SQLite database (what `iclaudit keys create` does)."""
    return create_key(f"sqlite:///{state / 'iclaudit.db'}", tenant)


def offline_context(browser, base_url: str, width: int = 1400, height: int = 900):
    """A fresh browser context (its own sessionStorage) that can reach only `base_url`."""
    context = browser.new_context(viewport={"width": width, "height": height}, base_url=base_url)
    context.route(
        "**/*",
        lambda route: route.continue_() if route.request.url.startswith(base_url) else route.abort(),
    )
    return context


def log_in(page, key: str, path: str = "/ui") -> None:
    """Open `path` and enter `key` in the login dialog (it opens on the page's first 401); fails, saying what
    the dialog shows, when it does not close."""
    page.goto(path)
    page.locator("#login-key").fill(key)
    page.locator("#login-form button[type=submit]").click()
    try:
        page.locator("#login").wait_for(state="hidden")
    except Exception as exc:
        shown = page.evaluate(
            """() => ({error: document.getElementById('login-error').textContent,
                       held: sessionStorage.getItem('iclaudit.apiKey') !== null})"""
        )
        raise AssertionError(f"the login dialog stayed open on {path}: {shown}") from exc
