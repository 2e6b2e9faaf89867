"""Fault injection on the real stack (issue 14): a PostgreSQL cluster and a redis-server of this module's own
(so that restarting them disturbs no other test), the API served by uvicorn on a loopback port, and
`iclaudit worker` subprocesses. Faults, in order:

1. a backlog of 20 audits with no worker: the sweep must not duplicate it (still 20 messages after
   several stale windows); then Redis restarted empty: the sweep re-sends exactly the lost 20;
2. a dropped connection mid-write: the row is locked so the worker's progress write waits, and that
   backend is killed with `pg_terminate_backend` (the issue's reproduction);
3. PostgreSQL restarted (fast shutdown) during each stage of a membership audit: collect, simulate, bound;
4. PostgreSQL stopped for longer than the stale window;
5. the worker running an audit SIGKILLed.

Every audit (including those a client POSTs during the faults) must end SUCCEEDED exactly once (one
"→ SUCCEEDED" line across the workers' logs), with the result of the un-faulted run, and every 5xx a client
sees during a fault must be a 503 in the error shape with Retry-After and `Connection: close`; no request
may fail at the transport level, and `/healthz` answers 200 throughout. Counts are printed (run with -s to see them).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import redis
import uvicorn

from app.audit.kinds.registry import kind_module
from app.audit.runtime import RunContext
from app.config import Settings
from app.db.migrate import upgrade
from app.main import create_app
from testkit.client import TERMINAL, bound_request, long_mia_request
from testkit.servers import Server, _die_with_parent, create_database, free_port, start_postgres, start_redis

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
ICLAUDIT = Path(sys.executable).parent / "iclaudit"
STALE_SECONDS = 3.0
MIA = long_mia_request(trials=1_000_000, seed=14)


@dataclass
class Stack:
    pg: Server
    broker: Server
    db_url: str
    env: dict[str, str]
    api: str
    logs: Path
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def dsn(self) -> str:
        return self.db_url.replace("postgresql+psycopg://", "postgresql://")

    def row(self, audit_id: str) -> dict[str, Any] | None:
        """The audit row read directly (None while the database is down)."""
        try:
            with psycopg.connect(self.dsn(), connect_timeout=2) as conn:
                cur = conn.execute(
                    "SELECT state, progress_stage, attempt, result FROM audits WHERE id = %s", (audit_id,)
                )
                state, stage, attempt, result = cur.fetchone()
        except psycopg.OperationalError:
            return None
        return {"state": state, "stage": stage, "attempt": attempt, "result": result}

    def wait_row(self, audit_id: str, ok: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            row = self.row(audit_id)
            if row is not None and ok(row):
                return row
            if row is not None and row["state"] in TERMINAL and not ok(row):
                raise AssertionError(f"audit {audit_id} ended {row['state']}: {row}")
            if time.monotonic() > deadline:
                raise AssertionError(f"audit {audit_id} still {row} after {timeout}s")
            time.sleep(0.01)

    def start_worker(self, name: str) -> subprocess.Popen[bytes]:
        log = self.logs / f"{name}.log"
        proc = subprocess.Popen(
            [str(ICLAUDIT), "worker", "--loglevel", "INFO"],
            env={**os.environ, **self.env},
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: _die_with_parent(signal.SIGKILL),
        )
        self.workers[name] = proc
        return proc

    def wait_ready(self, name: str, timeout: float = 90) -> None:
        log, deadline = self.logs / f"{name}.log", time.monotonic() + timeout
        while b" ready." not in log.read_bytes():
            if self.workers[name].poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"worker {name} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)

    def worker_log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.logs.glob("*.log")))


class Client(threading.Thread):
    """A client during a fault: polls one audit every 20 ms and submits a `bound` audit every 0.5 s on one
    keep-alive connection, keeping every 5xx answer and every transport error."""

    def __init__(self, api: str, audit_id: str, *, submit: bool = True) -> None:
        super().__init__(daemon=True)
        self.api, self.audit_id, self.submit = api, audit_id, submit
        self.answers: Counter[int] = Counter()
        self.server_errors: list[httpx.Response] = []
        self.transport_errors: list[str] = []
        self.submitted: list[str] = []
        self.healthz_failures: list[str] = []  # liveness must answer without the database
        self._done = threading.Event()

    def run(self) -> None:
        with httpx.Client(base_url=self.api, timeout=30) as http:
            last_post = last_health = 0.0
            while not self._done.is_set():
                try:
                    if time.monotonic() - last_health > 0.2:
                        last_health = time.monotonic()
                        health = http.get("/healthz")
                        if health.status_code != 200:
                            self.healthz_failures.append(f"{health.status_code} {health.text[:100]}")
                    if self.submit and time.monotonic() - last_post > 0.5:
                        last_post = time.monotonic()
                        response = http.post("/v1/audits", json=bound_request())
                        if response.status_code == 202:
                            self.submitted.append(response.json()["id"])
                    else:
                        response = http.get(f"/v1/audits/{self.audit_id}")
                except httpx.TransportError as exc:
                    self.transport_errors.append(repr(exc))
                    continue
                self.answers[response.status_code] += 1
                if response.status_code >= 500:
                    self.server_errors.append(response)
                time.sleep(0.02)

    def stop(self) -> None:
        self._done.set()
        self.join()

    def bad_server_errors(self) -> list[str]:
        """5xx answers that are not a 503 in the error shape with Retry-After and Connection: close."""
        bad = []
        for r in self.server_errors:
            body = r.json() if r.headers.get("content-type", "").startswith("application/json") else None
            error = body.get("error", {}) if isinstance(body, dict) else {}
            if not (
                r.status_code == 503
                and error.get("status") == "UNAVAILABLE"
                and error.get("code") == 503
                and "SELECT" not in error.get("message", "")
                and r.headers.get("retry-after")
                and r.headers.get("connection") == "close"
            ):
                bad.append(f"{r.status_code} {r.headers} {r.text[:300]}")
        return bad


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Stack]:
    pg, broker = start_postgres(), start_redis()
    logs = tmp_path_factory.mktemp("faults")
    db_url = create_database(pg.url, "faults")
    upgrade(db_url)
    env = {
        "ICLAUDIT_DATABASE_URL": db_url,
        "ICLAUDIT_BROKER_URL": broker.url,
        "ICLAUDIT_EXECUTOR": "celery",
        "ICLAUDIT_DATA_DIR": str(data_dir),
        "ICLAUDIT_STATE_DIR": str(logs),
        "ICLAUDIT_AUTH_ENABLED": "false",
        "ICLAUDIT_PRELOAD_MODELS": "true",
        "ICLAUDIT_DEFAULT_MODEL": "oracle",
        "ICLAUDIT_HEARTBEAT_SECONDS": "0.5",
        "ICLAUDIT_STALE_AFTER_SECONDS": str(STALE_SECONDS),
        "ICLAUDIT_SWEEP_SECONDS": "1",
        "ICLAUDIT_DB_RETRY_SECONDS": "60",
        "ICLAUDIT_CELERY_TENANT_AUDITS": "100",  # one tenant's backlog all in the broker (fairness: test_celery)
        "HF_HUB_OFFLINE": "1",
    }
    settings = Settings(
        **{k.removeprefix("ICLAUDIT_").lower(): v for k, v in env.items() if k.startswith("ICLAUDIT_")}
    )
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the API did not start"
        time.sleep(0.05)
    stack = Stack(pg=pg, broker=broker, db_url=db_url, env=env, api=f"http://127.0.0.1:{port}", logs=logs)
    try:
        yield stack
    finally:
        for proc in stack.workers.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        server.should_exit = True
        thread.join(timeout=30)
        pg.stop()
        broker.stop()


def _lock_row_until_a_progress_write_waits(stack: Stack, audit_id: str) -> tuple[psycopg.Connection, int]:
    """Hold the audit row's lock from just after the claim until the worker's next progress write waits on
    it; returns the holding connection and the waiting backend's pid. A claim that arrives while the lock
    is held queues ahead of the next SELECT … FOR UPDATE, so the lock is back before the kind starts."""
    holder = psycopg.connect(stack.dsn())
    deadline = time.monotonic() + 60
    while True:
        state = holder.execute("SELECT state FROM audits WHERE id = %s FOR UPDATE", (audit_id,)).fetchone()[0]
        if state == "RUNNING":
            break
        assert time.monotonic() < deadline, "the audit was never claimed"
        time.sleep(0.02)
        holder.commit()
    with psycopg.connect(stack.dsn(), autocommit=True) as watch:
        while True:
            waiting = watch.execute(
                "SELECT pid FROM pg_stat_activity WHERE application_name = 'iclaudit-worker' "
                "AND wait_event_type = 'Lock' AND query LIKE '%progress_stage%' "
                "AND query NOT LIKE '%started_at%'"
            ).fetchall()
            if waiting:
                return holder, waiting[0][0]
            assert time.monotonic() < deadline, "no progress write ever waited on the lock"
            time.sleep(0.01)


def _wait_done(stack: Stack, ids: list[str], timeout: float = 120) -> dict[str, dict[str, Any]]:
    rows = {}
    for audit_id in ids:
        rows[audit_id] = stack.wait_row(audit_id, lambda r: r["state"] in TERMINAL, timeout=timeout)
    return rows


def test_faults_end_with_every_audit_succeeded_once_and_unchanged(stack: Stack) -> None:
    module = kind_module("bound")
    bound_reference = module.run(module.Request.model_validate(bound_request()), RunContext()).stored()
    broker = redis.Redis.from_url(stack.broker.url)
    report: list[tuple[str, int, Counter[int], int, float]] = []  # (fault, injected, answers, bad 5xx, s)
    all_ids: dict[str, str] = {}  # audit id → "bound" | "mia"

    def during(fault: str, audit_id: str, inject: Callable[[], int], submit: bool = True) -> None:
        client = Client(stack.api, audit_id, submit=submit)
        started = time.monotonic()
        client.start()
        try:
            injected = inject()
        finally:
            time.sleep(0.5)  # the client keeps going through recovery
            client.stop()
        assert client.transport_errors == [], f"{fault}: {client.transport_errors[:3]}"
        assert client.healthz_failures == [], f"{fault}: /healthz {client.healthz_failures[:3]}"
        bad = client.bad_server_errors()
        assert bad == [], f"{fault}: 5xx not in the 503 shape: {bad[:3]}"
        all_ids.update(dict.fromkeys(client.submitted, "bound"))
        report.append((fault, injected, client.answers, len(bad), time.monotonic() - started))

    def submit(request: dict[str, Any]) -> str:
        response = httpx.post(f"{stack.api}/v1/audits", json=request, timeout=30)
        assert response.status_code == 202, response.text
        audit_id = response.json()["id"]
        all_ids[audit_id] = request["kind"]
        return audit_id

    # 1. a backlog with no worker is not duplicated; Redis restarted empty loses it, the sweep resends it once
    backlog = [submit(bound_request()) for _ in range(20)]

    def backlog_and_redis_restart() -> int:
        time.sleep(2 * STALE_SECONDS + 1)  # several sweeps (every 1 s) past the stale window
        assert broker.llen("audits") == 20, "the sweep duplicated a waiting backlog"
        stack.broker.restart()
        deadline = time.monotonic() + 15
        while broker.llen("audits") < 20:
            assert time.monotonic() < deadline, f"only {broker.llen('audits')} of 20 re-sent"
            time.sleep(0.1)
        time.sleep(STALE_SECONDS + 1)
        assert broker.llen("audits") == 20, "re-sent more than once"
        return 1

    during("redis restarted empty (backlog, no worker)", backlog[0], backlog_and_redis_restart, submit=False)
    for name in ("w1", "w2"):
        stack.start_worker(name)
    for name in ("w1", "w2"):
        stack.wait_ready(name)

    # the un-faulted run every membership audit below must reproduce
    reference_id = submit(MIA)
    reference = _wait_done(stack, [reference_id])[reference_id]
    assert reference["state"] == "SUCCEEDED" and reference["attempt"] == 1, reference

    # 2. a dropped connection mid-write (the row lock makes the progress write wait; its backend is killed)
    def kill_connection_mid_write(audit_id: str) -> int:
        holder, pid = _lock_row_until_a_progress_write_waits(stack, audit_id)
        with psycopg.connect(stack.dsn(), autocommit=True) as admin:
            assert admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()[0]
        holder.rollback()
        holder.close()
        return 1

    # 3. PostgreSQL restarted during each stage
    def restart_in(stage: str) -> Callable[[str], int]:
        def inject(audit_id: str) -> int:
            if stage == "collect":
                holder, _ = _lock_row_until_a_progress_write_waits(stack, audit_id)  # held at collect's start
                stack.pg.restart()
                holder.close()
            else:
                stack.wait_row(audit_id, lambda r: r["stage"].startswith(stage), timeout=60)
                stack.pg.restart()
            return 1

        return inject

    # 4. PostgreSQL stopped for longer than the stale window
    def stop_longer_than_stale(audit_id: str) -> int:
        stack.wait_row(audit_id, lambda r: r["stage"].startswith("simulate"), timeout=60)
        stack.pg.restart(down_seconds=STALE_SECONDS + 2)
        return 1

    # 5. the worker running the audit SIGKILLed
    def sigkill_worker(audit_id: str) -> int:
        stack.wait_row(audit_id, lambda r: r["state"] == "RUNNING" and r["stage"] != "starting", timeout=60)
        deadline = time.monotonic() + 10
        while True:
            holders = [
                name
                for name, proc in stack.workers.items()
                if proc.poll() is None
                and f"audit {audit_id} (mia) claimed"
                in (stack.logs / f"{name}.log").read_text(errors="replace")
            ]
            if holders:
                break
            assert time.monotonic() < deadline, "no worker logged the claim"
            time.sleep(0.05)
        stack.workers[holders[0]].send_signal(signal.SIGKILL)
        stack.workers[holders[0]].wait()
        return 1

    faults: list[tuple[str, Callable[[str], int], bool]] = [  # (name, inject, must stay attempt 1)
        ("connection killed mid-write", kill_connection_mid_write, True),
        ("postgres restarted during collect", restart_in("collect"), True),
        ("postgres restarted during simulate", restart_in("simulate"), True),
        ("postgres restarted during bound", restart_in("bound"), True),
        (f"postgres stopped {STALE_SECONDS + 2:.0f} s (> stale window)", stop_longer_than_stale, False),
        ("worker SIGKILLed", sigkill_worker, False),
    ]
    attempts = {}
    for fault, inject, first_attempt in faults:
        audit_id = submit(MIA)
        during(fault, audit_id, lambda inject=inject, audit_id=audit_id: inject(audit_id))
        row = _wait_done(stack, [audit_id])[audit_id]
        assert row["state"] == "SUCCEEDED", (fault, row)
        assert row["result"] == reference["result"], fault
        attempts[fault] = row["attempt"]
        if first_attempt:
            assert row["attempt"] == 1, f"{fault}: the first attempt was lost ({row['attempt']})"

    rows = _wait_done(stack, list(all_ids))
    log = stack.worker_log()
    # plain or JSON log lines ("→" may be written as \u2192)
    finished = Counter(re.findall(r"audit ([0-9a-f]{32}) attempt \d+ (?:→|\\u2192) SUCCEEDED", log))
    identical = sum(
        rows[i]["result"] == (reference["result"] if kind == "mia" else bound_reference)
        for i, kind in all_ids.items()
    )
    print("\nfault                                          injected  2xx  503  other-5xx  seconds")
    for fault, injected, answers, bad, seconds in report:
        ok = sum(n for code, n in answers.items() if code < 300)
        print(f"{fault:<46} {injected:>8} {ok:>4} {answers[503]:>4} {bad:>10} {seconds:>8.1f}")
    print(f"attempts of the faulted membership audits: {attempts}")
    print(
        f"faults injected {sum(r[1] for r in report)}; audits {len(all_ids)}; "
        f"SUCCEEDED {sum(r['state'] == 'SUCCEEDED' for r in rows.values())}; "
        f"finished once {sum(finished[i] == 1 for i in all_ids)}; results identical {identical}"
    )
    assert all(r["state"] == "SUCCEEDED" for r in rows.values()), {
        i: r["state"] for i, r in rows.items() if r["state"] != "SUCCEEDED"
    }
    assert all(finished[i] == 1 for i in all_ids), {i: finished[i] for i in all_ids if finished[i] != 1}
    assert identical == len(all_ids)
