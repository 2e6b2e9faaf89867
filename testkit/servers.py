"""Real servers for the tests: a throw-away PostgreSQL cluster and redis-server on free loopback ports.

Both run as children of the test process (PR_SET_PDEATHSIG, so they die with it even if pytest is killed)
and are stopped and deleted at the end of the session. initdb and postgres refuse to run as root, so as
root they run as the `postgres` user (or `nobody`) in a data directory that user owns.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from testkit.tiers import refuse

_PR_SET_PDEATHSIG = 1


def _die_with_parent(sig: int) -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port} within {timeout}s")


def postgres_bin_dir() -> Path | None:
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)
    return candidates[0].parent if candidates else None


@dataclass
class Server:
    url: str
    proc: subprocess.Popen[bytes]
    workdir: Path
    argv: list[Any] = field(default_factory=list)  # how it was started, for restart()
    popen: dict[str, Any] = field(default_factory=dict)
    port: int = 0

    def restart(self, down_seconds: float = 0.0, sig: int = signal.SIGINT) -> None:
        """Stop the process (SIGINT: PostgreSQL's fast shutdown, a clean stop for redis), stay down for
        `down_seconds`, start it again on the same port and data (redis comes back empty: no persistence)."""
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)
        time.sleep(down_seconds)
        self.proc = subprocess.Popen(self.argv, **self.popen)
        wait_for_port(self.port, self.proc, str(self.argv[0]))
        if self.url.startswith("postgresql"):
            _wait_accepting(self.url)

    def stop(self, sig: int = signal.SIGINT) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.workdir, ignore_errors=True)


def _unprivileged_user() -> str | None:
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            pwd.getpwnam(name)
            return name
        except KeyError:
            continue
    raise RuntimeError("running as root and neither a `postgres` nor a `nobody` user exists")


def start_postgres() -> Server:
    """initdb + postgres (fsync off: a test cluster) on a free port; URL for psycopg 3, database `postgres`."""
    refuse("PostgreSQL")
    bindir = postgres_bin_dir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed (initdb not found); `.ci/run` installs it")
    user = _unprivileged_user()
    workdir = Path(tempfile.mkdtemp(prefix="iclaudit-pg-"))
    datadir = workdir / "data"
    if user is not None:
        entry = pwd.getpwnam(user)
        os.chown(workdir, entry.pw_uid, entry.pw_gid)
    run_as = {"user": user} if user else {}
    subprocess.run(
        [bindir / "initdb", "-D", datadir, "-U", "iclaudit", "--auth=trust", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
        **run_as,
    )
    port = free_port()
    argv: list[Any] = [
        bindir / "postgres",
        "-D",
        datadir,
        "-p",
        str(port),
        "-h",
        "127.0.0.1",
        "-k",
        workdir,
        "-c",
        "fsync=off",
        "-c",
        "synchronous_commit=off",
        "-c",
        "full_page_writes=off",
    ]
    popen: dict[str, Any] = {
        "stdout": subprocess.DEVNULL,
        "stderr": open(workdir / "postgres.log", "ab"),  # noqa: SIM115 - lives as long as the server
        "preexec_fn": lambda: _die_with_parent(signal.SIGQUIT),
        **run_as,
    }
    proc = subprocess.Popen(argv, **popen)
    url = f"postgresql+psycopg://iclaudit@127.0.0.1:{port}/postgres"
    server = Server(url, proc, workdir, argv=argv, popen=popen, port=port)
    try:
        wait_for_port(port, proc, "postgres")
        _wait_accepting(server.url)
    except Exception:
        server.stop()
        raise
    return server


def _wait_accepting(url: str, timeout: float = 30.0) -> None:
    import psycopg

    dsn = url.replace("postgresql+psycopg://", "postgresql://")
    deadline = time.monotonic() + timeout
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def create_database(server_url: str, name: str) -> str:
    """A fresh empty database on the server; returns its URL."""
    import psycopg

    dsn = server_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    return server_url.rsplit("/", 1)[0] + f"/{name}"


def start_redis() -> Server:
    refuse("Redis")
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed; `.ci/run` installs it")
    workdir = Path(tempfile.mkdtemp(prefix="iclaudit-redis-"))
    port = free_port()
    argv: list[Any] = [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(workdir),
    ]
    popen: dict[str, Any] = {
        "stdout": subprocess.DEVNULL,
        "stderr": subprocess.DEVNULL,
        "preexec_fn": lambda: _die_with_parent(signal.SIGTERM),
    }
    proc = subprocess.Popen(argv, **popen)
    server = Server(f"redis://127.0.0.1:{port}/0", proc, workdir, argv=argv, popen=popen, port=port)
    try:
        wait_for_port(port, proc, "redis-server")
    except Exception:
        server.stop()
        raise
    return server


# --- one of each per test session, shared by every directory's conftest -------------------------------

_running: dict[str, Server] = {}


def session_server(name: str) -> Server:
    """The session's server `name` ("postgres" or "redis"), started on first use."""
    if name not in _running:
        _running[name] = start_postgres() if name == "postgres" else start_redis()
    return _running[name]


def stop_all() -> None:
    while _running:
        _running.popitem()[1].stop()


@pytest.fixture(scope="session")
def postgres_server() -> Server:
    return session_server("postgres")


@pytest.fixture(scope="session")
def redis_server() -> Server:
    return session_server("redis")


# --- migrated databases, one per test, copied from a template migrated once per session ---------------

_templates: dict[str, str] = {}


def _template(dialect: str) -> str:
    """A database upgraded to head once per session: a SQLite file path, or a Postgres database name."""
    from app.db.migrate import upgrade

    if dialect not in _templates:
        if dialect == "sqlite":
            workdir = Path(tempfile.mkdtemp(prefix="iclaudit-sqlite-"))
            _cleanup.append(workdir)
            path = workdir / "template.db"
            upgrade(f"sqlite:///{path}")
            _templates[dialect] = str(path)
        else:
            upgrade(create_database(session_server("postgres").url, "iclaudit_template"))
            _templates[dialect] = "iclaudit_template"
    return _templates[dialect]


def fresh_database(dialect: str, workdir: Path) -> str:
    """The URL of an empty database at the head revision: a copy of the SQLite template, or the session's
    one migrated Postgres database with every table truncated (faster here than CREATE DATABASE)."""
    template = _template(dialect)
    if dialect == "sqlite":
        target = workdir / "iclaudit.db"
        shutil.copyfile(template, target)
        return f"sqlite:///{target}"
    import psycopg

    url = session_server("postgres").url.rsplit("/", 1)[0] + f"/{template}"
    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://"), autocommit=True) as conn:
        conn.execute("TRUNCATE tenants, api_keys, audits, datasets CASCADE")
    return url


_cleanup: list[Path] = []


def _stop_everything() -> None:
    stop_all()
    for path in _cleanup:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_stop_everything)

DIALECTS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=DIALECTS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A migrated, empty database: SQLite file, then the session's real PostgreSQL (`postgres` marker)."""
    return fresh_database(request.param, tmp_path)


@contextmanager
def serve_in_thread(app: Any, what: str = "the test server", timeout: float = 30.0) -> Iterator[str]:
    """Run an ASGI `app` (its lifespan included) with uvicorn in a thread on a free 127.0.0.1 port; yields
    its base URL once it serves (within `timeout` seconds) and stops it on leaving."""
    import uvicorn

    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"{what} did not start")
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout)
