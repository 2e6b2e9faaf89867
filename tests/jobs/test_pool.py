"""The inline executor's worker processes, on a real `iclaudit serve` (uvicorn, SQLite, auth on): audits run
outside the API process, so polling a computing audit costs about what polling an idle server does
(issue 23), a quick audit does not wait behind a long one (issue 21), and a worker process that dies is
started again while the sweep re-runs its audit. Audits are held RUNNING by a held model (testkit/held_model.py)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.jobs.pool import AUDIT_NICE, WorkerProcess, context
from testkit.client import TERMINAL, bound_request, long_mia_request, wait_for
from testkit.held_model import HeldModel, held_iclinf, serve_held_model
from testkit.served import make_key, serve, stop
from testkit.servers import fresh_database

LONG_TRIALS = (
    20_000_000  # the computing audit is cancelled once measured (~20 s at 1M trials/s on an idle machine)
)


@pytest.fixture
def held_model(tmp_path: Path) -> Iterator[HeldModel]:
    with serve_held_model(tmp_path) as g:
        yield g


def _serve(tmp_path: Path, held_model: HeldModel, **env: str) -> tuple[object, httpx.Client]:
    state = tmp_path / "state"
    state.mkdir()
    extra = {
        "ICLAUDIT_MODELS_FILE": str(held_model.models_file),
        "ICLAUDIT_MAX_TRIALS": str(LONG_TRIALS),
        **env,
    }
    proc, url, _ = serve(state, auth=True, extra_env=extra)
    key = make_key(state, "alice")
    return proc, httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30)


def _polls(client: httpx.Client, audit_id: str, state: str, n: int = 200, runs: int = 3) -> float:
    """Seconds for `n` sequential polls of the audit, the best of `runs` (other work on a shared machine
    only adds), after 200 not timed (a fresh server warms up); every answer must show the audit in `state`."""
    for _ in range(n):
        client.get(f"/v1/audits/{audit_id}")
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        seen = {client.get(f"/v1/audits/{audit_id}").json()["state"] for _ in range(n)}
        best = min(best, time.perf_counter() - start)
        assert seen == {state}, f"the audit was {seen} during the polls, not only {state}"
    return best


def test_polls_of_a_computing_audit_take_at_most_twice_the_idle_time(
    tmp_path: Path, held_model: HeldModel
) -> None:
    """Issue 23: while an audit computes, 200 sequential polls of it take ≤ 2× what they take while idle.
    One worker process: a held audit holds it, so the measured audit is PENDING (nothing computes) for
    the idle polls; the model answers, and it is RUNNING with progress for the busy ones."""
    proc, client = _serve(tmp_path, held_model, ICLAUDIT_INLINE_WORKERS="1")
    try:
        held = client.post("/v1/audits", json=held_iclinf()).json()
        held_model.wait_arrival()
        audit = client.post("/v1/audits", json=long_mia_request(trials=LONG_TRIALS)).json()
        idle = _polls(client, audit["id"], "PENDING")
        held_model.open()
        assert wait_for(client.get, held["id"], timeout=60)["state"] == "FAILED"  # the held model refused it
        wait_for(client.get, audit["id"], ("RUNNING",), timeout=60, min_fraction=1e-9)
        busy = _polls(client, audit["id"], "RUNNING")
        client.post(f"/v1/audits/{audit['id']}/cancel")
        print(f"200 polls: idle {idle:.3f} s, while the audit computes {busy:.3f} s ({busy / idle:.2f}x)")
        assert busy <= 2 * idle, (idle, busy)
        assert wait_for(client.get, audit["id"], timeout=60)["state"] == "CANCELLED"
    finally:
        client.close()
        stop(proc)


def test_a_bound_audit_ends_within_10s_while_a_long_iclinf_audit_runs(
    tmp_path: Path, held_model: HeldModel
) -> None:
    """Issue 21: with two worker processes, an iclinf audit held in its model call keeps one; a bound
    audit submitted meanwhile runs on the other and ends within 10 s."""
    proc, client = _serve(tmp_path, held_model, ICLAUDIT_INLINE_WORKERS="2")
    try:
        held = client.post("/v1/audits", json=held_iclinf()).json()
        held_model.wait_arrival()
        start = time.monotonic()
        quick = client.post("/v1/audits", json=bound_request()).json()
        done = wait_for(client.get, quick["id"], timeout=10)
        elapsed = time.monotonic() - start
        print(
            f"bound audit ended {done['state']} {elapsed:.2f} s after its submit, behind a held iclinf audit"
        )
        assert done["state"] == "SUCCEEDED" and elapsed <= 10
        assert client.get(f"/v1/audits/{held['id']}").json()["state"] == "RUNNING"  # held throughout
        held_model.open()
        assert wait_for(client.get, held["id"], timeout=60)["state"] == "FAILED"
    finally:
        client.close()
        stop(proc)


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


def test_a_killed_worker_process_is_replaced_and_its_audit_run_again(
    tmp_path: Path, held_model: HeldModel
) -> None:
    """SIGKILL the worker process holding an audit: the API stays up, the sweep re-runs the audit (attempt
    2, in a new process, held again) once its heartbeat is stale, and later audits run."""
    proc, client = _serve(
        tmp_path,
        held_model,
        ICLAUDIT_INLINE_WORKERS="1",
        ICLAUDIT_HEARTBEAT_SECONDS="0.5",
        ICLAUDIT_STALE_AFTER_SECONDS="3",
        ICLAUDIT_SWEEP_SECONDS="1",
    )
    try:
        held = client.post("/v1/audits", json=held_iclinf()).json()
        held_model.wait_arrival()
        assert client.get(f"/v1/audits/{held['id']}").json()["attempt"] == 1
        (forkserver,) = [
            pid
            for pid in _children(proc.pid)  # type: ignore[attr-defined]
            if b"forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        (worker,) = _children(forkserver)
        os.kill(worker, signal.SIGKILL)
        held_model.wait_arrival()  # attempt 2, in a new process, held again
        again = client.get(f"/v1/audits/{held['id']}").json()
        assert (again["state"], again["attempt"]) == ("RUNNING", 2)
        assert worker not in _children(forkserver)
        held_model.open()
        assert wait_for(client.get, held["id"], timeout=60)["state"] in TERMINAL
        quick = client.post("/v1/audits", json=bound_request()).json()
        assert wait_for(client.get, quick["id"], timeout=30)["state"] == "SUCCEEDED"
        assert client.get("/healthz").status_code == 200
    finally:
        client.close()
        stop(proc)
    assert "died" in (tmp_path / "state" / "serve.log").read_text()


def test_a_worker_process_runs_below_the_api_priority(tmp_path: Path) -> None:
    """A worker process (child_setup) renices itself by AUDIT_NICE, so an audit gets the CPU the requests
    leave: read back from this process, which keeps its own priority."""
    if not hasattr(os, "getpriority"):
        pytest.skip("no process priorities on this platform")
    settings = Settings(
        database_url=fresh_database("sqlite", tmp_path), state_dir=tmp_path, preload_models=False
    )
    base = os.getpriority(os.PRIO_PROCESS, 0)
    stopping = context().Event()  # held here: the child opens its semaphore after this call returns
    worker = WorkerProcess(settings=settings, stopping=stopping, name="nice-probe", on_write=None)
    try:
        expected, deadline = min(19, base + AUDIT_NICE), time.monotonic() + 60
        while (nice := os.getpriority(os.PRIO_PROCESS, worker.process.pid)) != expected:
            assert time.monotonic() < deadline, f"worker at nice {nice}, not {expected}"
            time.sleep(0.05)
        assert worker.alive
        assert os.getpriority(os.PRIO_PROCESS, 0) == base
    finally:
        worker.stop(timeout=10)
