"""Memory of the embedded service with 1, 2 and 4 inline workers, each auditing with the packaged model.

For each worker count N: a fresh `iclaudit serve` (SQLite in a temporary state directory, the model cache
of ./var/cache so the packaged GGUF is converted once, ICLAUDIT_INLINE_WORKERS=N), then N copies of the
quickstart's model audit (examples/mia-demo-synthetic-records.json, a different seed each) submitted at
once, so that every worker runs one. While they run, every 0.5 s, the resident (RSS) and proportional
(PSS: each shared page divided among the processes that map it) set sizes of the API process and each of
its descendants (the forkserver and the workers) are read from /proc/PID/smaps_rollup; a process's row is
its largest PSS sample, and the total is the largest sum over one sample. Target: each worker beyond the
first adds ≤ 300 MB of PSS (`per_extra_worker_mb`).

    .venv/bin/python bench/run.py memory   # ICLAUDIT_BENCH_MEMORY_WORKERS=1,2,4, ICLAUDIT_BENCH_MEMORY_CALLS
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
ICLAUDIT = Path(sys.executable).parent / "iclaudit"
AUDIT = ROOT / "examples" / "mia-demo-synthetic-records.json"
WORKERS = tuple(int(n) for n in os.environ.get("ICLAUDIT_BENCH_MEMORY_WORKERS", "1,2,4").split(","))
CALLS = int(os.environ.get("ICLAUDIT_BENCH_MEMORY_CALLS", "0"))
"""`llm_calls` of each audit; 0 keeps the example's 100 (a smaller number shortens the run on a busy machine:
the weights and imports, what is shared, do not depend on it)."""
TARGET_MB = 300


def _children() -> dict[int, list[int]]:
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            tree.setdefault(int(fields[1]), []).append(int(entry.name))
    return tree


def _tree(root: int) -> list[int]:
    children, out, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _memory(pid: int) -> tuple[str, float, float] | None:
    """(name, RSS MB, PSS MB) of a process, or None once it is gone."""
    try:
        rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return None
    kb = {line.split(":")[0]: int(line.split()[1]) for line in rollup[1:] if line.split()[-1] == "kB"}
    return cmdline[-80:], kb["Rss"] / 1024, kb["Pss"] / 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _measure(workers: int) -> dict:
    state = Path(tempfile.mkdtemp(prefix=f"iclaudit-memory-{workers}-"))
    env = {
        **os.environ,
        "ICLAUDIT_STATE_DIR": str(state),
        "ICLAUDIT_CACHE_DIR": str(ROOT / "var" / "cache"),
        "ICLAUDIT_AUTH_ENABLED": "false",
        "ICLAUDIT_INLINE_WORKERS": str(workers),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    env.pop("ICLAUDIT_DATABASE_URL", None)
    subprocess.run([str(ICLAUDIT), "migrate"], env=env, cwd=state, check=True, capture_output=True)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (state / "serve.log").open("wb")
    proc = subprocess.Popen(
        [str(ICLAUDIT), "serve", "--port", str(port)],
        env=env,
        cwd=state,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=5).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the service did not start; log {state / 'serve.log'}")
            time.sleep(0.5)
        body = json.loads(AUDIT.read_text())
        ids = []
        for seed in range(workers):
            request = {**body, "seed": seed} | ({"llm_calls": CALLS} if CALLS else {})
            reply = httpx.post(f"{url}/v1/audits", json=request, timeout=60)
            reply.raise_for_status()
            ids.append(reply.json()["id"])
        peaks: dict[int, tuple[str, float, float]] = {}
        total_pss = total_rss = 0.0
        started = time.monotonic()
        states: list[str] = []
        while time.monotonic() - started < 3600:
            sample = {pid: m for pid in _tree(proc.pid) if (m := _memory(pid)) is not None}
            total_pss = max(total_pss, sum(m[2] for m in sample.values()))
            total_rss = max(total_rss, sum(m[1] for m in sample.values()))
            for pid, m in sample.items():
                if pid not in peaks or m[2] > peaks[pid][2]:
                    peaks[pid] = m
            audits = [httpx.get(f"{url}/v1/audits/{i}", timeout=30).json() for i in ids]
            states = [a["state"] if a["state"] != "FAILED" else f"FAILED: {a.get('error')}" for a in audits]
            if all(a["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for a in audits):
                break
            time.sleep(0.5)
        return {
            "workers": workers,
            "states": states,
            "seconds": round(time.monotonic() - started, 1),
            "total_pss_mb": round(total_pss, 1),
            "total_rss_mb": round(total_rss, 1),
            "processes": [
                {"pid": pid, "cmd": name, "rss_mb": round(rss, 1), "pss_mb": round(pss, 1)}
                for pid, (name, rss, pss) in sorted(peaks.items())
            ],
        }
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
        shutil.rmtree(state, ignore_errors=True)


def run() -> Iterator[dict]:
    """One line per process and one total per worker count; then the PSS each worker beyond the first adds."""
    totals: dict[int, float] = {}
    for workers in WORKERS:
        measured = _measure(workers)
        for p in measured["processes"]:
            yield {
                "name": f"workers_{workers}_process",
                "value": p["pss_mb"],
                "unit": "MB PSS",
                "rss_mb": p["rss_mb"],
                "pid": p["pid"],
                "cmd": p["cmd"],
            }
        totals[workers] = measured["total_pss_mb"]
        yield {
            "name": f"workers_{workers}_total",
            "value": measured["total_pss_mb"],
            "unit": "MB PSS",
            "rss_mb": measured["total_rss_mb"],
            "audits": measured["states"],
            "seconds": measured["seconds"],
            "load_avg_1m": round(os.getloadavg()[0], 2),
        }
    first = min(totals)
    for workers, total in totals.items():
        if workers > first:
            yield {
                "name": f"per_extra_worker_{first}_to_{workers}",
                "value": round((total - totals[first]) / (workers - first), 1),
                "unit": "MB PSS",
                "target": TARGET_MB,
            }
