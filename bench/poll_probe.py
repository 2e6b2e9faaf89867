"""One short poll phase against a fresh stack, for profiling and A/B checks of the polling hot path
(bench/suites/api_load.py runs the full set of phases; this runs one, with knobs):

    python bench/poll_probe.py open 300 10        # open loop, 300 req/s for 10 s
    python bench/poll_probe.py closed 200 10      # 200 closed-loop pollers for 10 s
    python bench/poll_probe.py inm 200 10         # the same with If-None-Match

Environment: STACK (embedded | postgres_celery; default embedded), MIAS (mia audits queued before the
phase, default 2; with one inline worker they run one after another, so 8 keep one computing through a
10 s phase), TARGETS=running (poll only the mia audits; default: them and 20 finished ones), PYSPY=1
(py-spy record of the API process into bench-poll-probe.txt, `--gil`, raw format: the CPU by function,
needs `pip install py-spy`). Prints one line: req/s, p50/p99, errors, statuses,
/healthz max, server CPU ms/req (the API process's /proc CPU time over the phase ÷ requests, the audit's
included on the embedded stack), load average; then the final states of the mia audits.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import aiohttp

from app.audit.kinds.registry import kind_module
from bench import loadgen
from bench.suites import api_load


async def _probe(base: str, key: str, pid: int, mode: str, n: int, seconds: float) -> None:
    auth = {"Authorization": f"Bearer {key}"}
    async with aiohttp.ClientSession(headers=auth, timeout=loadgen.TIMEOUT) as admin:
        bound = kind_module("bound").EXAMPLE
        finished = [
            i for i, _, _ in await asyncio.gather(*(api_load._submit(admin, base, bound) for _ in range(20)))
        ]
        await api_load._until_done(admin, base, finished, 120)
        running = [
            (await api_load._submit(admin, base, api_load.MIA))[0]
            for _ in range(int(os.environ.get("MIAS", "2")))
        ]
        await asyncio.sleep(1.0)
        polled = running if os.environ.get("TARGETS") == "running" else running + finished
        urls = [f"{base}/v1/audits/{i}" for i in polled]
        spy = None
        if os.environ.get("PYSPY") == "1":
            spy = subprocess.Popen(
                [
                    str(Path(sys.executable).parent / "py-spy"),
                    "record",
                    "-p",
                    str(pid),
                    "-d",
                    str(int(seconds)),
                    "-r",
                    "200",
                    "--gil",
                    "--nonblocking",
                    "-f",
                    "raw",
                    "-o",
                    "bench-poll-probe.txt",
                ],
                stdout=subprocess.DEVNULL,
            )
        cpu = api_load._cpu_seconds(pid)
        async with loadgen.probe(base) as health, loadgen.session(1024 if mode == "open" else n) as client:
            if mode == "open":
                stats = await loadgen.open_loop(client, lambda i: urls[i % len(urls)], auth, n, seconds)
            else:
                stats = await loadgen.closed_loop(
                    client, lambda i: urls[i % len(urls)], auth, n, seconds, mode == "inm"
                )
        cpu = api_load._cpu_seconds(pid) - cpu
        s = stats.summary()
        print(
            f"{os.environ.get('STACK', 'embedded')} {mode} {n}: req/s {s['achieved_rps']}, p50 {s['p50_ms']} ms, "
            f"p99 {s['p99_ms']} ms, errors {s['errors']}, statuses {s['statuses']}, /healthz max "
            f"{1000 * max(health.latencies, default=float('nan')):.0f} ms, server CPU "
            f"{1000 * cpu / max(1, len(stats.latencies)):.2f} ms/req, load {os.getloadavg()[0]:.2f}",
            flush=True,
        )
        if spy is not None:
            spy.wait()
        print("mia audits:", sorted((await api_load._until_done(admin, base, running, 600)).values()))


def main() -> None:
    mode, n, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    if mode not in ("open", "closed", "inm"):
        raise SystemExit(__doc__)
    stack = os.environ.get("STACK", "embedded")
    with tempfile.TemporaryDirectory() as tmp, api_load._stack(stack, Path(tmp)) as (base, key, pid):
        asyncio.run(_probe(base, key, pid, mode, n, seconds))


if __name__ == "__main__":
    main()
