"""The README's quickstart, timed as a new user meets it: `iclaudit serve` as `make serve` runs it (SQLite in
a fresh state directory, auth off, the embedded executor with its default workers, the packaged model
preloaded), then the demo audit submitted twice with `iclaudit submit … --wait`: the first on a fresh
server (cold: worker processes start, the packaged GGUF is converted and loaded), the second warm. Also the
resident memory of every process of the server once the demo ran (the API process and each worker).

Usage: .venv/bin/python docs/results/quickstart.py   (appends one JSON line to quickstart-runs.jsonl)

`--warm N` times the demo audit itself, warm, without a server: one process loads the packaged model once,
then runs the demo N times, each with the model's prompt cache emptied first (so every run pays for its own
forward passes, as a new request on a warm worker does), and appends one line with each run's seconds and
verdict.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # the venv this script runs in (.venv/bin)
DEMO = ROOT / "examples" / "mia-demo-synthetic-records.json"
OUT = Path(__file__).with_name("quickstart-runs.jsonl")


def submit(env: dict[str, str]) -> tuple[float, dict]:
    start = time.monotonic()
    done = subprocess.run(
        [str(BIN / "iclaudit"), "submit", str(DEMO), "--wait", "--json", "--allow-inconclusive"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    seconds = time.monotonic() - start
    if done.returncode not in (0, 1, 4):
        raise SystemExit(f"submit failed ({done.returncode}): {done.stderr[-2000:]}")
    return seconds, json.loads(done.stdout[done.stdout.index("{") :])


def time_warm(runs: int) -> None:
    """The demo `runs` times in one process with the model loaded and its prompt cache emptied before each."""
    from app.audit.runtime import no_progress
    from app.audit.standalone import local_context, run_request

    body = json.loads(DEMO.read_text())
    ctx = local_context(progress=no_progress)
    started = time.monotonic()
    engine = ctx.engines.llm(body["model"])
    load = time.monotonic() - started
    timed = []
    for _ in range(runs):
        engine.cache.clear()
        getattr(engine, "kv_store", {}).clear()
        start = time.monotonic()
        result = run_request(body, ctx)
        timed.append(
            {
                "seconds": round(time.monotonic() - start, 1),
                "verdict": result["verdict"],
                "epsilon_lower": {
                    tm: (result.get(tm) or {}).get("epsilon_lower") for tm in ("black_box", "white_box")
                },
                "epsilon_detectable": result.get("epsilon_detectable"),
                "forward_passes": result.get("llm_forward_passes"),
            }
        )
    line = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "mode": "warm, one process, prompt cache emptied before each run",
        "request": body,
        "cores": os.cpu_count(),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "model_load_seconds": round(load, 1),
        "runs": timed,
    }
    with OUT.open("a") as f:
        f.write(json.dumps(line) + "\n")
    json.dump(line, sys.stdout, indent=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--warm", type=int, default=0, help="time the demo N times warm, without a server")
    args = parser.parse_args()
    if args.warm:
        time_warm(args.warm)
        return
    port = 8700 + os.getpid() % 200
    with tempfile.TemporaryDirectory() as state:
        env = {
            **os.environ,
            "ICLAUDIT_STATE_DIR": state,
            "ICLAUDIT_AUTH_ENABLED": "false",
            "ICLAUDIT_URL": f"http://127.0.0.1:{port}",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        env.pop("ICLAUDIT_DATABASE_URL", None)
        subprocess.run([str(BIN / "iclaudit"), "migrate"], env=env, check=True, capture_output=True)
        started = time.monotonic()
        log = open(Path(state) / "serve.log", "wb")  # noqa: SIM115 - closed at the end
        server = subprocess.Popen(
            [str(BIN / "iclaudit"), "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if server.poll() is not None:
                    raise SystemExit((Path(state) / "serve.log").read_text()[-3000:])
                time.sleep(0.2)
            ready = time.monotonic() - started
            cold, first = submit(env)
            warm, second = submit(env)
            memory = sorted(
                (
                    {"name": _role(p, server.pid), "rss_mb": round(p.memory_info().rss / 2**20)}
                    for p in _tree(server.pid)
                ),
                key=lambda m: -m["rss_mb"],
            )
        finally:
            server.terminate()
            server.wait(60)
            log.close()
    line = {
        "when": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "load_average": [round(x, 1) for x in os.getloadavg()],
        "serve_ready_seconds": round(ready, 1),
        "demo_cold_seconds": round(cold, 1),
        "demo_warm_seconds": round(warm, 1),
        "cold_audit_seconds": _run_seconds(first),
        "warm_audit_seconds": _run_seconds(second),
        "verdict": (first.get("result") or {}).get("verdict"),
        "processes": memory,
    }
    with OUT.open("a") as f:
        f.write(json.dumps(line) + "\n")
    json.dump(line, sys.stdout, indent=1)


def _tree(pid: int) -> list[psutil.Process]:
    root = psutil.Process(pid)
    return [p for p in (root, *root.children(recursive=True)) if p.is_running()]


def _role(process: psutil.Process, server: int) -> str:
    """api (the `iclaudit serve` process), forkserver (it forks the workers), worker, or resource tracker."""
    if process.pid == server:
        return "api"
    command = " ".join(process.cmdline())
    if "resource_tracker" in command:
        return "resource tracker"
    parent = process.parent()
    return "forkserver" if parent is not None and parent.pid == server else "worker"


def _run_seconds(audit: dict) -> float | None:
    if not audit.get("started_at") or not audit.get("finished_at"):
        return None
    start, end = (datetime.fromisoformat(audit[k]) for k in ("started_at", "finished_at"))
    return round((end - start).total_seconds(), 1)


if __name__ == "__main__":
    main()
