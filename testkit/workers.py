"""`iclaudit worker` processes on a real PostgreSQL and Redis, for the tests and benchmarks that run the
Celery stack: the settings its processes share, starting workers and waiting until Celery is ready."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from app.config import Settings
from testkit.served import ICLAUDIT
from testkit.servers import _die_with_parent


def celery_env(database_url: str, broker_url: str, data_dir: Path, state_dir: Path) -> dict[str, str]:
    """The environment every process of one Celery stack shares (auth off: one caller speaks for all)."""
    return {
        "ICLAUDIT_DATABASE_URL": database_url,
        "ICLAUDIT_BROKER_URL": broker_url,
        "ICLAUDIT_EXECUTOR": "celery",
        "ICLAUDIT_DATA_DIR": str(data_dir),
        "ICLAUDIT_STATE_DIR": str(state_dir),
        "ICLAUDIT_AUTH_ENABLED": "false",
    }


def start_worker(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`iclaudit worker` with `env` over this process's environment, its output in `log` (kept as
    `proc.log`); it is killed when this process dies."""
    proc = subprocess.Popen(
        [str(ICLAUDIT), "worker", "--loglevel", "INFO"],
        env={**os.environ, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: _die_with_parent(signal.SIGKILL),
    )
    proc.log = log  # type: ignore[attr-defined]
    return proc


def wait_ready(procs: list[subprocess.Popen[bytes]], timeout: float = 120.0) -> None:
    """Until every worker's log says Celery is ready; AssertionError with the log's tail when one exits
    first or the time runs out."""
    deadline = time.monotonic() + timeout
    for proc in procs:
        log: Path = proc.log  # type: ignore[attr-defined]
        while b" ready." not in log.read_bytes():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)


def settings_of(env: dict[str, str]) -> Settings:
    """The Settings an in-process API reads from the stack's environment `env`."""
    return Settings(
        **{k.removeprefix("ICLAUDIT_").lower(): v for k, v in env.items() if k.startswith("ICLAUDIT_")}
    )


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
