"""Pool stall on the embedded default: closed-loop status pollers against `GET /v1/audits/{id}`
while a CPU-heavy inline audit runs, with a /healthz probe on its own connection, for a source tree given
on the command line (this checkout, or a worktree of an older commit for the before/after figures).

    python -m bench.suites.stall [--tree PATH] [--pollers 10 60 100] [--seconds 10]

Authentication on, SQLite, the inline executor; the server is `uvicorn app.main:create_app` started in
PATH. Prints one JSON line per phase: pollers, requests, p50/p99/max ms, errors (anything but 2xx/304),
/healthz max ms, and the state the running audits ended in. A phase with no audit running gives the
baseline the GIL cost of inline audits is read against.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import loadgen
from testkit.client import bound_request, long_mia_request
from testkit.servers import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]

SETUP = """
import sys
from app.db.migrate import upgrade
from app.db.engine import make_engine, make_session_factory
from app.db import keys
url = sys.argv[1]
upgrade(url)
with make_session_factory(make_engine(url)).begin() as session:
    print(keys.create_api_key(session, "bench")[1])
"""
SERVE = "import sys, uvicorn; uvicorn.run('app.main:create_app', factory=True, port=int(sys.argv[1]), log_level='warning')"


async def _phase(base: str, key: str, pollers: int, seconds: float, audits: int) -> dict:
    headers = {"Authorization": f"Bearer {key}"}
    async with loadgen.session(pollers + audits + 2, headers) as client:
        running = []
        for i in range(audits):
            body = long_mia_request(trials=2_000_000, seed=100 + i)
            async with client.post(f"{base}/v1/audits", json=body) as response:
                answer = await response.json()
                assert response.status == 202, answer
                running.append(answer["id"])
        target = running[0] if running else None
        if target is None:  # poll a finished audit
            async with client.post(f"{base}/v1/audits", json=bound_request()) as r:
                target = (await r.json()).get("id", "x")
        async with loadgen.probe(base, 0.25) as health:
            stats = await loadgen.closed_loop(
                client, lambda _: f"{base}/v1/audits/{target}", {}, pollers, seconds
            )
        deadline = time.monotonic() + 300
        states: dict[str, str] = {}
        while running and time.monotonic() < deadline:
            for audit_id in running:
                async with client.get(f"{base}/v1/audits/{audit_id}") as r:
                    audit = await r.json()
                    error = audit.get("error") or {}
                    states[audit_id] = audit["state"] + (
                        f" {error.get('message', '')[:120]}" if error else ""
                    )
            if all(s.split()[0] in ("SUCCEEDED", "FAILED", "CANCELLED") for s in states.values()):
                break
            await asyncio.sleep(0.5)
    return {
        "pollers": pollers,
        "audits_running": audits,
        **{k: v for k, v in stats.summary().items() if k != "statuses"},
        "statuses": stats.summary()["statuses"],
        "healthz_max_ms": round(1000 * max(health.latencies, default=0.0), 1),
        "healthz_errors": health.errors,
        "audit_states": sorted(states.values()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", type=Path, default=ROOT)
    parser.add_argument("--pollers", type=int, nargs="+", default=[10, 60, 100])
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iclaudit-stall-") as workdir:
        url = f"sqlite:///{workdir}/iclaudit.db"
        env = {
            **os.environ,
            "ICLAUDIT_DATABASE_URL": url,
            "ICLAUDIT_STATE_DIR": workdir,
            "ICLAUDIT_DEFAULT_MODEL": "oracle",
            "ICLAUDIT_DATA_DIR": str(ROOT.parent / "shared" / "datasets"),
            "ICLAUDIT_PRELOAD_MODELS": "false",
            "HF_HUB_OFFLINE": "1",
        }
        key = subprocess.run(
            [sys.executable, "-c", SETUP, url],
            cwd=args.tree,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        port = free_port()
        log = open(Path(workdir) / "server.log", "wb")  # noqa: SIM115
        server = subprocess.Popen(
            [sys.executable, "-c", SERVE, str(port)],
            cwd=args.tree,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            wait_for_port(port, server, "server", timeout=120)
            base = f"http://127.0.0.1:{port}"
            phases = [(args.pollers[0], 0)] + [(n, 1) for n in args.pollers]
            for pollers, audits in phases:
                row = asyncio.run(_phase(base, key, pollers, args.seconds, audits))
                print(json.dumps({"tree": str(args.tree), **row}), flush=True)
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()
