"""Load on the real servers over loopback (part of `bench/run.py api`).

**Against bare FastAPI** (`_side_by_side`): a bare FastAPI app (bench/bare_app.py) runs beside
the service under the same uvicorn settings, and each phase offers both the same load, the bare app first:
open loop at 300 and 1,000 req/s and closed loop with 200 pollers, of finished audits and of running ones,
while two `mia` audits compute (topped up every second; ICLAUDIT_INLINE_WORKERS=2). Each row holds both
servers' figures, the ratio of the service's served req/s (2xx and 304; a 429 is counted apart) to the bare
app's, and each server's CPU per request (its process's /proc CPU time over the phase ÷ requests) and
their ratio.

**The rest** (`_scenarios`, with ICLAUDIT_BENCH_EXTRAS=1): closed loop with 500 clients, the same with
If-None-Match, and submit bursts; at the end every audit that ran during the load must have SUCCEEDED.

Stacks (ICLAUDIT_BENCH_STACKS, default `embedded`): the embedded default (`iclaudit serve`: SQLite, inline
executor) and `postgres_celery` (PostgreSQL + Redis + one `iclaudit worker`), started as
testkit/servers.py starts them, authentication on. `/healthz` is probed every 0.5 s throughout. The
load generator (bench/loadgen.py) runs in this process and shares the machine's cores with the servers.
`ICLAUDIT_BENCH_LOAD_SECONDS` sets every phase's length (default 20).

API processes (`ICLAUDIT_BENCH_API_WORKERS`, default 1 for `embedded` and 2 for `postgres_celery`): the
service runs as `iclaudit serve --workers N`, and the bare app with the same N (`bench/bare_app.py
--workers N`), so each side has as many processes; a server's CPU time is its supervisor's plus its worker
processes'. `ICLAUDIT_BENCH_LOADS` (comma-separated, e.g. `open_1000`) runs only those loads, for a check.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp

from app.audit.kinds.registry import kind_module
from bench import loadgen
from testkit.served import stop
from testkit.servers import (  # the tests' real-server helpers
    _die_with_parent,
    create_database,
    free_port,
    start_postgres,
    start_redis,
    wait_for_port,
)
from testkit.tenants import create_key

ROOT = Path(__file__).resolve().parents[2]

ICLAUDIT = Path(sys.executable).parent / "iclaudit"
SECONDS = float(os.environ.get("ICLAUDIT_BENCH_LOAD_SECONDS", "20"))
LOADS = ("open_300", "open_1000", "closed_200")
# PostgreSQL + Celery: two API processes for this two-core machine (one per core; the load generator, the
# databases and the worker share them)
API_WORKERS = {"embedded": 1, "postgres_celery": 2}
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
MIA = {
    "kind": "mia",
    "dataset": "ag_news",
    "model": "oracle",
    "mechanism": {"name": "private_voting", "partitions": 4, "shots_per_partition": 2},
    "epsilon": 1.0,
    "delta": 1e-5,
    "attack": {"name": "inquiry", "threat_model": "both"},
    "llm_calls": 200,
    "trials": 1_000_000,
    "estimator": "bootstrap",
}


def _workers(stack: str) -> int:
    return int(os.environ.get("ICLAUDIT_BENCH_API_WORKERS", API_WORKERS.get(stack, 1)))


def _loads() -> tuple[str, ...]:
    wanted = os.environ.get("ICLAUDIT_BENCH_LOADS")
    return tuple(w for w in wanted.split(",") if w in LOADS) if wanted else LOADS


def _one_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    """User + system CPU time so far (/proc) of a server: the process and, under `--workers N`, its worker
    processes (its direct children), to tell the server's cost per request apart from the machine's load."""
    total = _one_cpu(pid)
    children = Path(f"/proc/{pid}/task/{pid}/children")
    for child in children.read_text().split() if children.exists() else ():
        with contextlib.suppress(OSError):
            total += _one_cpu(int(child))
    return total


def _key(url: str) -> str:
    return create_key(url, "bench", migrate=True)


def _start(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        args,
        env={**os.environ, **env},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
        preexec_fn=lambda: _die_with_parent(signal.SIGTERM),
    )


@contextlib.contextmanager
def _stack(name: str, workdir: Path) -> Iterator[tuple[str, str, int]]:
    """(base URL, API key, API server pid) of a running stack, stopped after the block."""
    env = {
        "ICLAUDIT_STATE_DIR": str(workdir),
        "ICLAUDIT_DATA_DIR": str(ROOT.parent / "shared" / "datasets"),
        "ICLAUDIT_AUTH_ENABLED": "true",
        "ICLAUDIT_DEFAULT_MODEL": "oracle",
        "ICLAUDIT_INLINE_WORKERS": "2",  # two audits compute at once
        # counted on every request as always, but high enough that a catch-up burst after a stall of this
        # shared machine is not refused (the bare app has no limit; 1,200/s is the default)
        "ICLAUDIT_RATE_LIMIT": os.environ.get("ICLAUDIT_RATE_LIMIT", "100000/second"),
        "HF_HUB_OFFLINE": "1",
    }
    servers, procs = [], []
    try:
        if name == "postgres_celery":
            postgres, redis = start_postgres(), start_redis()
            servers += [postgres, redis]
            env |= {
                "ICLAUDIT_DATABASE_URL": create_database(postgres.url, "iclaudit_bench"),
                "ICLAUDIT_BROKER_URL": redis.url,
                "ICLAUDIT_EXECUTOR": "celery",
            }
        key = _key(env.get("ICLAUDIT_DATABASE_URL") or f"sqlite:///{workdir / 'iclaudit.db'}")
        if name == "postgres_celery":
            log = workdir / "worker.log"
            procs.append(_start([str(ICLAUDIT), "worker", "--loglevel", "INFO"], env, log))
            deadline = time.monotonic() + 120
            while b" ready." not in log.read_bytes():
                if procs[-1].poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not start:\n{log.read_text()[-2000:]}")
                time.sleep(0.2)
        port = free_port()
        serve = [str(ICLAUDIT), "serve", "--port", str(port), "--workers", str(_workers(name))]
        procs.append(_start(serve, env, workdir / "api.log"))
        wait_for_port(port, procs[-1], "iclaudit serve", timeout=120)
        if _workers(name) > 1:
            time.sleep(3)  # every worker process is up and accepting
        yield f"http://127.0.0.1:{port}", key, procs[-1].pid
    finally:
        for proc in reversed(procs):
            stop(proc)
        for server in servers:
            server.stop()


async def _submit(client: aiohttp.ClientSession, base: str, body: dict) -> tuple[str | None, float, str]:
    start = time.perf_counter()
    try:
        async with client.post(f"{base}/v1/audits", json=body) as response:
            data = await response.json(content_type=None)
            return data.get("id"), time.perf_counter() - start, str(response.status)
    except (TimeoutError, aiohttp.ClientError) as exc:
        return None, time.perf_counter() - start, type(exc).__name__


async def _states(client: aiohttp.ClientSession, base: str, ids: list[str]) -> dict[str, str]:
    states = {}
    for audit_id in ids:
        async with client.get(f"{base}/v1/audits/{audit_id}") as response:
            # a 429 or 503 of a server under load: not known this time
            states[audit_id] = (await response.json(content_type=None)).get("state", "UNKNOWN")
    return states


async def _until_done(client: aiohttp.ClientSession, base: str, ids: list[str], timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        states = await _states(client, base, ids)
        if all(s in TERMINAL for s in states.values()) or time.monotonic() > deadline:
            return states
        await asyncio.sleep(1.0)


async def _scenarios(stack: str, base: str, key: str, pid: int) -> list[dict]:
    auth = {"Authorization": f"Bearer {key}"}
    rows: list[dict] = []
    async with aiohttp.ClientSession(headers=auth, timeout=loadgen.TIMEOUT) as admin:
        bound = kind_module("bound").EXAMPLE
        finished = [i for i, _, _ in await asyncio.gather(*(_submit(admin, base, bound) for _ in range(20)))]
        await _until_done(admin, base, finished, 120)
        running: list[str] = []

        async def keep_audits_running() -> int:
            """Two mia audits queued or running when a phase starts; returns how many run now."""
            states = await _states(admin, base, running)
            live = [i for i, s in states.items() if s not in TERMINAL]
            for _ in range(max(0, 2 - len(live))):
                audit_id, _, status = await _submit(admin, base, MIA)
                assert audit_id, f"mia submit answered {status}"
                running.append(audit_id)
            await asyncio.sleep(0.5)
            return sum(s == "RUNNING" for s in (await _states(admin, base, running)).values())

        def targets() -> list[str]:
            return running[-2:] + finished

        async def phase(name: str, load) -> None:
            await asyncio.sleep(3)  # the last phase's backlog drains
            running_now = await keep_audits_running()
            ids = targets()
            urls = [f"{base}/v1/audits/{i}" for i in ids]
            cpu = _cpu_seconds(pid)
            async with loadgen.probe(base) as health:
                stats = await load(lambda i: urls[i % len(urls)])
            cpu = _cpu_seconds(pid) - cpu
            rows.append(
                {
                    "name": f"{stack}/{name}",
                    "value": stats.summary()["p99_ms"],
                    "unit": "ms (p99)",
                    **stats.summary(),
                    "healthz_max_ms": round(1000 * max(health.latencies, default=float("nan")), 1),
                    "healthz_errors": health.errors,
                    "audits_running": running_now,
                    "server_cpu_ms_per_request": round(1000 * cpu / max(1, len(stats.latencies)), 2),
                    "machine_load_1m": round(os.getloadavg()[0], 1),
                    "phase_seconds": SECONDS,
                }
            )
            print(f"# {rows[-1]}", file=sys.stderr, flush=True)

        for rate in (300, 1000):
            async with loadgen.session(1024) as client:
                await phase(
                    f"open_loop_{rate}rps",
                    lambda url, c=client, r=rate: loadgen.open_loop(c, url, auth, r, SECONDS),
                )
        for inm in (False, True):
            for clients in (200, 500):
                async with loadgen.session(clients) as client:
                    await phase(
                        f"closed_loop_{clients}" + ("_if_none_match" if inm else ""),
                        lambda url, c=client, n=clients, e=inm: loadgen.closed_loop(
                            c, url, auth, n, SECONDS, e
                        ),
                    )

        for burst in (100, 300):
            await keep_audits_running()
            async with loadgen.session(burst, auth) as client, loadgen.probe(base) as health:
                start = time.perf_counter()
                submitted = await asyncio.gather(*(_submit(client, base, bound) for _ in range(burst)))
                stats = loadgen.Stats(
                    latencies=[t for _, t, _ in submitted], elapsed=time.perf_counter() - start
                )
                stats.statuses.update(s for _, _, s in submitted)
                ids = [i for i, _, _ in submitted if i]
                states = await _until_done(admin, base, ids, 300)
            rows.append(
                {
                    "name": f"{stack}/submit_burst_{burst}",
                    "value": stats.summary()["p99_ms"],
                    "unit": "ms (p99)",
                    **stats.summary(),
                    "healthz_max_ms": round(1000 * max(health.latencies, default=float("nan")), 1),
                    "succeeded": sum(s == "SUCCEEDED" for s in states.values()),
                    "drained_s": round(time.perf_counter() - start, 1),
                }
            )
            print(f"# {rows[-1]}", file=sys.stderr, flush=True)

        states = await _until_done(admin, base, running, 600)
        rows.append(
            {
                "name": f"{stack}/audits_during_load_succeeded",
                "value": sum(s == "SUCCEEDED" for s in states.values()),
                "unit": "audits",
                "of": len(states),
                "states": sorted(states.values()),
            }
        )
    return rows


@contextlib.contextmanager
def _bare(workdir: Path, workers: int) -> Iterator[tuple[str, int]]:
    """(base URL, pid) of bench/bare_app.py served as `iclaudit serve` serves the service, with as many
    processes."""
    port = free_port()
    proc = _start(
        [sys.executable, "-m", "bench.bare_app", "--port", str(port), "--workers", str(workers)],
        {"ICLAUDIT_STATE_DIR": str(workdir)},
        workdir / "bare.log",
    )
    try:
        wait_for_port(port, proc, "bench/bare_app.py", timeout=60)
        if workers > 1:
            time.sleep(3)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        stop(proc)


def _served_rps(stats: loadgen.Stats) -> float:
    served = sum(n for s, n in stats.statuses.items() if s.startswith("2") or s == "304")
    return served / stats.elapsed if stats.elapsed else 0.0


class _Computing:
    """Keeps two `mia` audits queued or running for as long as it runs (checked every second)."""

    def __init__(self, client: aiohttp.ClientSession, base: str) -> None:
        self.client, self.base = client, base
        self.ids: list[str] = []
        self.live: list[str] = []
        self.running_at_checks: list[int] = []

    async def top_up(self) -> None:
        states = await _states(self.client, self.base, self.live)
        self.live = [i for i, s in states.items() if s not in TERMINAL]
        self.running_at_checks.append(sum(s == "RUNNING" for s in states.values()))
        while len(self.live) < 2:
            audit_id, _, status = await _submit(self.client, self.base, MIA)
            assert audit_id, f"mia submit answered {status}"
            self.ids.append(audit_id)
            self.live.append(audit_id)

    async def loop(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.top_up()
            except (TimeoutError, aiohttp.ClientError, AssertionError) as exc:  # a busy server: next second
                print(f"# topping up the computing audits failed ({exc!r}); retrying", file=sys.stderr)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


async def _phase(
    base: str, pid: int, auth: dict[str, str], load: str, url_for, seconds: float
) -> tuple[loadgen.Stats, float, list[float]]:
    """(stats, server CPU seconds, /healthz latencies) of one load on one server."""
    kind, n = load.split("_")
    cpu = _cpu_seconds(pid)
    async with loadgen.probe(base) as health, loadgen.session(1024 if kind == "open" else int(n)) as client:
        if kind == "open":
            stats = await loadgen.open_loop(client, url_for, auth, int(n), seconds)
        else:
            stats = await loadgen.closed_loop(client, url_for, auth, int(n), seconds)
    return stats, _cpu_seconds(pid) - cpu, health.latencies


async def _side_by_side(stack: str, base: str, key: str, pid: int, bare: str, bare_pid: int) -> list[dict]:
    auth = {"Authorization": f"Bearer {key}"}
    rows: list[dict] = []
    async with aiohttp.ClientSession(headers=auth, timeout=loadgen.TIMEOUT) as admin:
        bound = kind_module("bound").EXAMPLE
        finished = [i for i, _, _ in await asyncio.gather(*(_submit(admin, base, bound) for _ in range(20)))]
        await _until_done(admin, base, finished, 120)
        computing = _Computing(admin, base)
        await computing.top_up()
        stop = asyncio.Event()
        keeper = asyncio.create_task(computing.loop(stop))
        await asyncio.sleep(2.0)  # the two audits are claimed and computing
        try:
            for target in ("finished", "running"):
                for load in _loads():
                    figures: dict[str, dict] = {}
                    for name, url, server_pid in (("bare", bare, bare_pid), ("service", base, pid)):
                        await asyncio.sleep(2)  # the last phase's backlog drains

                        def url_for(i: int, url: str = url, target: str = target) -> str:
                            ids = finished if target == "finished" else computing.live or computing.ids[-2:]
                            return f"{url}/v1/audits/{ids[i % len(ids)]}"

                        stats, cpu, health = await _phase(url, server_pid, auth, load, url_for, SECONDS)
                        summary = stats.summary()
                        figures[name] = {
                            **{k: summary[k] for k in ("achieved_rps", "p50_ms", "p99_ms", "errors")},
                            "served_rps": round(_served_rps(stats), 1),
                            "throttled": summary["throttled"],
                            "requests": summary["requests"],
                            "statuses": summary["statuses"],
                            "cpu_ms_per_request": round(1000 * cpu / max(1, len(stats.latencies)), 3),
                            "healthz_max_ms": round(1000 * max(health, default=float("nan")), 1),
                        }
                    service, baseline = figures["service"], figures["bare"]
                    rows.append(
                        {
                            "name": f"{stack}/vs_bare/{load}/{target}",
                            "value": round(service["served_rps"] / max(baseline["served_rps"], 1e-9), 3),
                            "unit": "x bare FastAPI served req/s",
                            "service": service,
                            "baseline": baseline,
                            "ratio": round(service["served_rps"] / max(baseline["served_rps"], 1e-9), 3),
                            "cpu_ratio": round(
                                service["cpu_ms_per_request"] / max(baseline["cpu_ms_per_request"], 1e-9), 2
                            ),
                            "audits_running": computing.running_at_checks[-1],
                            "machine_load_1m": round(os.getloadavg()[0], 1),
                            "phase_seconds": SECONDS,
                            "api_processes": _workers(stack),
                        }
                    )
                    print(f"# {rows[-1]}", file=sys.stderr, flush=True)
        finally:
            stop.set()
            await keeper
        states = await _until_done(admin, base, computing.ids, 600)
        rows.append(
            {
                "name": f"{stack}/vs_bare/audits_computing_succeeded",
                "value": sum(s == "SUCCEEDED" for s in states.values()),
                "unit": "audits",
                "of": len(states),
                "running_at_checks": {
                    str(n): computing.running_at_checks.count(n)
                    for n in sorted(set(computing.running_at_checks))
                },
            }
        )
    return rows


def run(stacks: tuple[str, ...] | None = None) -> Iterator[dict]:
    stacks = stacks or tuple(os.environ.get("ICLAUDIT_BENCH_STACKS", "embedded").split(","))
    for stack in stacks:
        with (
            tempfile.TemporaryDirectory(prefix=f"iclaudit-load-{stack}-") as tmp,
            _stack(stack, Path(tmp)) as (base, key, pid),
            _bare(Path(tmp), _workers(stack)) as (bare, bare_pid),
        ):
            yield from asyncio.run(_side_by_side(stack, base, key, pid, bare, bare_pid))
            if os.environ.get("ICLAUDIT_BENCH_EXTRAS") == "1":
                yield from asyncio.run(_scenarios(stack, base, key, pid))
