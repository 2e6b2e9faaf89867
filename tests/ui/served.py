"""Helpers of the browser tests: a real `iclaudit serve` (uvicorn, SQLite, inline executor, auth on) and Debian's
headless Chromium driven by Playwright (`executable_path`, never `playwright install`), offline: every
request that is not to the server is aborted, so a page that needs a CDN fails here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
from service.servers import _die_with_parent, free_port

ICLAUDIT = Path(sys.executable).parent / "iclaudit"
CHROMIUM = os.environ.get("ICLAUDIT_CHROMIUM", "/usr/bin/chromium")
# Trials of the audits a test watches live or cancels: 1M finished within a second on an idle CI machine, so the
# page saw the bar jump from 0 to 1; the server is started with ICLAUDIT_MAX_TRIALS raised to allow it.
LIVE_TRIALS = 8_000_000
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@dataclass
class Served:
    url: str
    alice: str
    bob: str
    log: Path

    def client(self, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def serve(
    state: Path, *, auth: bool, extra_env: dict[str, str] | None = None
) -> tuple[subprocess.Popen, str, dict]:
    """`iclaudit migrate` then `iclaudit serve` on a free port in `state`; returns (process, url, env)."""
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
    port = free_port()
    proc = subprocess.Popen(
        [str(ICLAUDIT), "serve", "--port", str(port)],
        env=env,
        cwd=state,
        stdout=(state / "serve.log").open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: _die_with_parent(signal.SIGTERM),
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url, env
        except httpx.TransportError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError((state / "serve.log").read_text())
        time.sleep(0.1)


def stop(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def make_key(state: Path, tenant: str) -> str:
    """A key for `tenant` in the server's SQLite database (what `iclaudit keys create` does)."""
    from app.db import keys
    from app.db.engine import make_engine, make_session_factory

    engine = make_engine(f"sqlite:///{state / 'iclaudit.db'}")
    try:
        with make_session_factory(engine).begin() as session:
            return keys.create_api_key(session, tenant)[1]
    finally:
        engine.dispose()


def offline_context(browser, base_url: str, width: int = 1400, height: int = 900):
    """A fresh browser context (its own sessionStorage) that can reach only `base_url`."""
    context = browser.new_context(viewport={"width": width, "height": height}, base_url=base_url)
    context.route(
        "**/*",
        lambda route: route.continue_() if route.request.url.startswith(base_url) else route.abort(),
    )
    return context
