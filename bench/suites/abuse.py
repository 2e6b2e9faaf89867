"""`bench/run.py abuse`: the abuse attacks H1-H4, M3 and M4 (docs/results/api.md), each for
ICLAUDIT_BENCH_ATTACK_SECONDS (15 s) against one `iclaudit serve` (embedded default: SQLite, inline
executor, auth on), side by side with a well-behaved tenant. For each attack one row: the well-behaved
tenant's polls (open loop, 20 req/s of its
finished audit: p99, errors), `/healthz` every 0.25 s (p99, max), the server's RSS growth (each process,
sampled every 0.2 s: the API process's and its largest child's peak minus its value before the attack, and
the processes the attack started, counted whole), and the
well-behaved tenant's own audit, submitted 2 s into the attack: how long it waited to start against one
audit's length (its own run time), or for M4 how long its webhook delivery took after it finished.

- H1: no key, 4 senders of 23 MB bodies of `1.5,` to POST /v1/audits and of `NaN,` to POST /v1/datasets.
- H2: a sweep grid of 8 keys x 64 values (2.8e14 points) to POST /v1/sweeps and /v1/schedules, 2 senders.
- H3: 32 uploads that send their headers and first row, then a byte a second.
- H4 sweep: a 1.9 MiB base x 64 points to POST /v1/sweeps (413), 2 senders; H4 list: GET
  /v1/audits?view=full over 20 stored audits of ~0.5 MB, back to back.
- M3: 100 queued `mia` audits of the attacker (oracle, 150k trials each, about a second).
- M4: 32 deliveries to the attacker's receiver answering after 3 s (testkit/internal_server.py).
- R1 reply flood: endpoint audits (4 calls in flight) against a target whose every reply streams 400 MB
  (chunked, and with a Content-Length saying so), and a webhook to a receiver that does the same, 2 senders.
- R2 template blow-up: a 1.8 MB body template of `{context}` × 180,000 (422 at submit), and one of
  `{context}` × 1,000 that passes the submit's floor but not the real records (AUDIT_ERROR before sending).
- R3 plan flood: the reported plan (`canaries` 500 × `contexts` 1000: 422) and the largest allowed (40 × 100,
  4,000 pairs) back to back, 2 senders; the well-behaved tenant's own plan is timed against it alone.
Rows also give the database's growth (the SQLite file and its WAL) over the attack.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import multiprocessing.synchronize
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
from pathlib import Path

import aiohttp
import numpy as np
import psutil

from app.audit.kinds.registry import kind_module
from bench import loadgen
from bench.suites import api_load
from testkit.client import endpoint_request, white_box_request
from testkit.internal_server import internal_server  # the tests' slow webhook receiver
from testkit.servers import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]

SECONDS = float(os.environ.get("ICLAUDIT_BENCH_ATTACK_SECONDS", "15"))
FLOOD = 400 * 2**20  # bytes each reply of the flooding target and receiver would send
BOUND = kind_module("bound").EXAMPLE
ONE_AUDIT = {**api_load.MIA, "trials": 150_000, "llm_calls": 200}


def _rss_by_pid(pid: int) -> dict[int, float]:
    """MB of resident memory of the server process and of each of its children (audit, plan processes)."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return {}
    rss = {}
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            rss[p.pid] = p.memory_info().rss / 2**20
    return rss


def _growth(pid: int, before: dict[int, float], peak: dict[int, float]) -> dict[str, float | int]:
    """The attack's memory cost: the whole tree's peak over its start, the server process's own growth, the
    largest growth of a child alive at the start, and the children it started (counted whole)."""
    old = [p for p in peak if p in before and p != pid]
    new = [p for p in peak if p not in before]
    return {
        "rss_growth_mb": round(sum(peak.values()) - sum(before.values()), 1),
        "rss_growth_api_mb": round(peak.get(pid, 0.0) - before.get(pid, 0.0), 1),
        "rss_growth_child_mb": round(max((peak[p] - before[p] for p in old), default=0.0), 1),
        "rss_new_processes": len(new),
        "rss_new_processes_mb": round(sum(peak[p] for p in new), 1),
        "rss_before_mb": round(sum(before.values()), 1),
    }


def _when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _scored(n: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return {
        **BOUND,
        "counts": None,
        "scores_in": [round(x, 6) for x in rng.normal(1.0, 1.0, n).tolist()],
        "scores_out": [round(x, 6) for x in rng.normal(0.0, 1.0, n).tolist()],
    }


async def _raw_post(base: str, path: str, headers: str, chunk: bytes, total: int, pace: float = 0.0) -> str:
    """Send `total` bytes of `chunk` repeated as a POST body (headers as written); the status line, or why
    the server stopped reading."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {total}\r\n{headers}\r\n".encode()
        )
        sent = 0
        while sent < total:
            piece = chunk[: total - sent]
            writer.write(piece)
            await writer.drain()
            sent += len(piece)
            if pace:
                await asyncio.sleep(pace)
        line = await asyncio.wait_for(reader.readline(), 30)
        return line.decode(errors="replace").strip()
    except (ConnectionError, TimeoutError, OSError) as exc:
        return type(exc).__name__
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


async def _repeat(stop: asyncio.Event, senders: int, send: Callable[[], Awaitable[object]]) -> None:
    async def loop() -> None:
        while not stop.is_set():
            with contextlib.suppress(Exception):
                await send()

    await asyncio.gather(*(loop() for _ in range(senders)))


def _flood_main(port: int) -> None:
    """The flooding target and webhook receiver (its own process): every reply streams FLOOD bytes."""
    import uvicorn
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    app = FastAPI()
    chunk = b"x" * 2**16

    def chunks() -> Iterator[bytes]:
        for _ in range(FLOOD // len(chunk)):
            yield chunk

    @app.post("/chunked")
    @app.post("/hooks/flood")
    async def chunked() -> StreamingResponse:
        return StreamingResponse(chunks(), media_type="application/json")

    @app.post("/sized")
    async def sized() -> StreamingResponse:
        return StreamingResponse(
            chunks(), media_type="application/json", headers={"Content-Length": str(FLOOD)}
        )

    @app.post("/ok")
    async def ok() -> JSONResponse:
        return JSONResponse({"choices": [{"text": "1"}]})

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _db_mb(workdir: Path | None) -> float:
    if workdir is None:
        return 0.0
    return sum(p.stat().st_size for p in workdir.glob("iclaudit.db*")) / 2**20


class Bench:
    def __init__(
        self,
        base: str,
        pid: int,
        keys: dict[str, str],
        hooks_port: int,
        hits: list[str],
        flood_port: int = 0,
        workdir: Path | None = None,
    ) -> None:
        self.base, self.pid, self.keys, self.hooks_port, self.hits = base, pid, keys, hooks_port, hits
        self.flood_port, self.workdir = flood_port, workdir

    def client(self, tenant: str) -> aiohttp.ClientSession:
        return aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.keys[tenant]}"}, timeout=loadgen.TIMEOUT
        )

    # --- the attacks -------------------------------------------------------------------------------------

    async def h1(self, stop: asyncio.Event) -> None:
        big = 23 * 2**20

        async def send() -> None:
            await _raw_post(
                self.base, "/v1/audits", "Content-Type: application/json\r\n", b"1.5," * 16384, big
            )
            await _raw_post(
                self.base, "/v1/datasets", "Content-Type: application/json\r\n", b"NaN," * 16384, big
            )

        await _repeat(stop, 4, send)

    async def h2(self, stop: asyncio.Event) -> None:
        grid = {f"labels.k{i}": list(range(64)) for i in range(8)}
        async with self.client("attacker") as api:

            async def send() -> None:
                for route, body in (
                    ("/v1/sweeps", {"base": BOUND, "grid": grid}),
                    ("/v1/schedules", {"cron": "0 * * * *", "sweep": {"base": BOUND, "grid": grid}}),
                ):
                    async with api.post(f"{self.base}{route}", json=body) as response:
                        await response.read()

            await _repeat(stop, 2, send)

    async def h3(self, stop: asyncio.Event) -> None:
        key = self.keys["attacker"]
        part = (
            b'--XyZ\r\nContent-Disposition: form-data; name="file"; filename="d.jsonl"\r\n'
            b'Content-Type: application/octet-stream\r\n\r\n{"text": "slow", "label": "a"}\n'
        )
        headers = f"Authorization: Bearer {key}\r\nContent-Type: multipart/form-data; boundary=XyZ\r\n"

        async def slow() -> None:
            host, port = self.base.removeprefix("http://").split(":")
            reader, writer = await asyncio.open_connection(host, int(port))
            try:
                writer.write(
                    f"POST /v1/datasets HTTP/1.1\r\nHost: {host}\r\nContent-Length: 1000000\r\n{headers}\r\n".encode()
                )
                writer.write(part)
                while not stop.is_set() and not reader.at_eof():
                    writer.write(b"x")
                    await writer.drain()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), 1.0)
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        async def keep_one() -> None:
            while not stop.is_set():
                await slow()  # refused at once past the tenant's upload cap: open another

        await asyncio.gather(*(keep_one() for _ in range(32)))

    async def h4_setup(self) -> None:
        async with self.client("attacker") as api:
            ids = []
            for seed in range(20):
                async with api.post(f"{self.base}/v1/audits", json=_scored(25_000, seed)) as response:
                    ids.append((await response.json())["id"])
            await api_load._until_done(api, self.base, ids, 300)

    async def h4_sweep(self, stop: asyncio.Event) -> None:
        base = _scored(90_000, 99)  # ~1.9 MiB as JSON
        sweep = {"base": base, "grid": {"confidence": [0.5 + i / 200 for i in range(64)]}}
        async with self.client("attacker") as api:

            async def post() -> None:
                async with api.post(f"{self.base}/v1/sweeps", json=sweep) as response:
                    await response.read()

            await _repeat(stop, 2, post)

    async def h4_list(self, stop: asyncio.Event) -> None:
        async with self.client("attacker") as api:

            async def full() -> None:
                async with api.get(
                    f"{self.base}/v1/audits", params={"view": "full", "page_size": 500}
                ) as response:
                    await response.read()

            await _repeat(stop, 1, full)

    async def m3(self, stop: asyncio.Event) -> None:
        async with self.client("attacker") as api:
            ids = []
            for seed in range(100):
                async with api.post(f"{self.base}/v1/audits", json={**ONE_AUDIT, "seed": seed}) as response:
                    ids.append((await response.json()).get("id"))
            await stop.wait()
            for audit_id in ids:
                if audit_id:
                    async with api.post(f"{self.base}/v1/audits/{audit_id}/cancel") as response:
                        await response.read()

    async def m4(self, stop: asyncio.Event) -> None:
        async with self.client("attacker") as api:
            url = f"http://127.0.0.1:{self.hooks_port}/hooks/slow/attacker"
            async with api.post(f"{self.base}/v1/webhooks", json={"url": url}) as response:
                hook = (await response.json())["id"]
            for _ in range(32):
                async with api.post(f"{self.base}/v1/audits", json=BOUND) as response:
                    await response.read()
            await stop.wait()
            async with api.delete(f"{self.base}/v1/webhooks/{hook}") as response:
                await response.read()

    async def r1(self, stop: asyncio.Event) -> None:
        flood = f"http://127.0.0.1:{self.flood_port}"
        async with self.client("attacker") as api:
            async with api.post(f"{self.base}/v1/webhooks", json={"url": f"{flood}/hooks/flood"}) as response:
                hook = (await response.json())["id"]

            async def send() -> None:
                for path in ("chunked", "sized"):
                    body = endpoint_request(
                        f"{flood}/{path}", dataset="dbpedia14", trials=50, epsilon=None, max_concurrency=4
                    )
                    async with api.post(f"{self.base}/v1/audits", json=body) as response:
                        await response.read()
                async with api.post(f"{self.base}/v1/audits", json=BOUND) as response:  # a delivery each
                    await response.read()
                await asyncio.sleep(0.5)

            await _repeat(stop, 2, send)
            async with api.delete(f"{self.base}/v1/webhooks/{hook}") as response:
                await response.read()

    async def r2(self, stop: asyncio.Event) -> None:
        ok = f"http://127.0.0.1:{self.flood_port}/ok"
        blown = endpoint_request(
            ok, dataset="dbpedia14", trials=50, epsilon=None, body={"prompt": "{context} " * 180_000}
        )  # 1.8 MB: 422 at submit
        late = endpoint_request(
            ok, dataset="dbpedia14", trials=50, epsilon=None, body={"prompt": "{context} " * 1_000}
        )  # AUDIT_ERROR before sending
        async with self.client("attacker") as api:

            async def send() -> None:
                for body in (blown, late):
                    async with api.post(f"{self.base}/v1/audits", json=body) as response:
                        await response.read()
                await asyncio.sleep(0.25)

            await _repeat(stop, 2, send)

    async def r3(self, stop: asyncio.Event) -> None:
        async with self.client("attacker") as api:

            async def send() -> None:
                for body in (
                    white_box_request("synthetic_records", 500, 1000, seed=1, shots=2),
                    white_box_request("synthetic_records", 40, 100, seed=1, shots=2),
                ):
                    async with api.post(f"{self.base}/v1/audits/plan", json=body) as response:
                        await response.read()

            await _repeat(stop, 2, send)

    # --- the well-behaved tenant ---------------------------------------------------------------------------

    async def good_plan(self) -> float:
        """Seconds the well-behaved tenant's plan of its own audit takes to answer (200)."""
        async with aiohttp.ClientSession(
            headers={"Authorization": f"Bearer {self.keys['good']}"}, timeout=aiohttp.ClientTimeout(total=300)
        ) as api:
            start = time.monotonic()
            async with api.post(f"{self.base}/v1/audits/plan", json=ONE_AUDIT) as response:
                await response.read()
                assert response.status == 200, response.status
            return round(time.monotonic() - start, 2)

    async def good_audit(self, webhook: bool) -> dict[str, float]:
        """The well-behaved tenant's audit, submitted now: its wait to start and run time, or (webhook) how
        long after it finished its delivery arrived."""
        async with self.client("good") as api:
            hook = None
            if webhook:
                url = f"http://127.0.0.1:{self.hooks_port}/hooks/good"
                async with api.post(f"{self.base}/v1/webhooks", json={"url": url}) as response:
                    hook = (await response.json())["id"]
                seen = len([h for h in self.hits if h.startswith("/hooks/good")])
            async with api.post(f"{self.base}/v1/audits", json=BOUND if webhook else ONE_AUDIT) as response:
                audit_id = (await response.json())["id"]
            await api_load._until_done(api, self.base, [audit_id], 300)
            async with api.get(f"{self.base}/v1/audits/{audit_id}") as response:
                audit = await response.json()
            figures = {
                "wait_s": round(_when(audit["started_at"]) - _when(audit["created_at"]), 2),
                "run_s": round(_when(audit["finished_at"]) - _when(audit["started_at"]), 2),
            }
            if hook is not None:
                deadline = time.time() + 120
                while (
                    len([h for h in self.hits if h.startswith("/hooks/good")]) <= seen
                    and time.time() < deadline
                ):
                    await asyncio.sleep(0.05)
                figures["delivery_s"] = round(time.time() - _when(audit["finished_at"]), 2)
                async with api.delete(f"{self.base}/v1/webhooks/{hook}") as response:
                    await response.read()
            return figures

    async def attack(self, name: str, attack: Callable[[asyncio.Event], Awaitable[None]]) -> dict:
        async with self.client("good") as api:
            async with api.post(f"{self.base}/v1/audits", json=BOUND) as response:
                mine = (await response.json())["id"]
            await api_load._until_done(api, self.base, [mine], 60)
        if name == "R3":
            await self.good_plan()  # its plan process started
        plan_alone = await self.good_plan() if name == "R3" else None
        before = _rss_by_pid(self.pid)
        peak = dict(before)
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                for p, mb in _rss_by_pid(self.pid).items():
                    peak[p] = max(peak.get(p, 0.0), mb)
                await asyncio.sleep(0.2)

        db_before = _db_mb(self.workdir)

        async def delayed_audit() -> dict[str, float]:
            await asyncio.sleep(2.0)
            if plan_alone is not None:
                return {"plan_s": await self.good_plan(), "plan_alone_s": plan_alone}
            return await self.good_audit(webhook=name == "M4")

        sampler = asyncio.create_task(sample())
        # the attacker runs in a process of its own: its JSON encoding and socket work would otherwise stall
        # this process's event loop, and the well-behaved tenant's figures with it
        spawn = multiprocessing.get_context("spawn")
        ready, ends = spawn.Event(), spawn.Event()
        attacker = spawn.Process(
            target=_attack_child,
            args=(
                self.base,
                self.pid,
                self.keys,
                self.hooks_port,
                self.flood_port,
                attack.__name__,
                ready,
                ends,
            ),
        )
        attacker.start()
        await asyncio.get_running_loop().run_in_executor(None, ready.wait, 60)
        auth = {"Authorization": f"Bearer {self.keys['good']}"}
        async with loadgen.probe(self.base, 0.25) as health, loadgen.session(64) as client:
            audit_task = asyncio.create_task(delayed_audit())
            polls = await loadgen.open_loop(
                client, lambda i: f"{self.base}/v1/audits/{mine}", auth, 20, SECONDS
            )
            audit = await audit_task
        ends.set()
        stop.set()
        await asyncio.get_running_loop().run_in_executor(None, attacker.join, 60)
        if attacker.is_alive():
            attacker.kill()
        await sampler
        summary = polls.summary()
        health_ms = 1000 * np.asarray(health.latencies or [float("nan")])
        row = {
            "name": f"abuse/{name.replace(' ', '_')}",
            "value": summary["p99_ms"],
            "unit": "ms (the well-behaved tenant's p99)",
            "good_p99_ms": summary["p99_ms"],
            "good_errors": summary["errors"],
            "good_requests": summary["requests"],
            "good_statuses": summary["statuses"],
            "healthz_p99_ms": round(float(np.percentile(health_ms, 99)), 1),
            "healthz_max_ms": round(float(health_ms.max()), 1),
            "healthz_errors": health.errors,
            **_growth(self.pid, before, peak),
            "db_growth_mb": round(_db_mb(self.workdir) - db_before, 2),
            **{f"audit_{k}": v for k, v in audit.items()},
            "machine_load_1m": round(os.getloadavg()[0], 1),
            "attack_seconds": SECONDS,
            "attacker": "a process of its own",
        }
        print(f"# {row}", file=sys.stderr, flush=True)
        return row


def _attack_child(
    base: str,
    pid: int,
    keys: dict[str, str],
    hooks_port: int,
    flood_port: int,
    method: str,
    ready: multiprocessing.synchronize.Event,
    ends: multiprocessing.synchronize.Event,
) -> None:
    """Run one attack (a Bench method) until `ends` is set, in this process."""

    async def main() -> None:
        stop = asyncio.Event()
        bench = Bench(base, pid, keys, hooks_port, [], flood_port)
        task = asyncio.create_task(getattr(bench, method)(stop))
        ready.set()
        await asyncio.get_running_loop().run_in_executor(None, ends.wait)
        stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 60)

    asyncio.run(main())


async def _run(bench: Bench) -> list[dict]:
    chosen = os.environ.get("ICLAUDIT_BENCH_ATTACKS")  # e.g. "H1,M3" for a check of a few
    if not chosen or "H4" in chosen:
        await bench.h4_setup()
    attacks = {
        "H1": bench.h1,
        "H2": bench.h2,
        "H3": bench.h3,
        "H4 sweep": bench.h4_sweep,
        "H4 list": bench.h4_list,
        "M3": bench.m3,
        "M4": bench.m4,
        "R1": bench.r1,
        "R2": bench.r2,
        "R3": bench.r3,
    }
    rows = []
    for name, attack in attacks.items():
        if chosen and name.split()[0] not in chosen.split(",") and name not in chosen.split(","):
            continue
        rows.append(await bench.attack(name, attack))
        await asyncio.sleep(3)  # the attack's leftovers drain
    return rows


def _keys(url: str, tenants: tuple[str, ...]) -> dict[str, str]:
    from testkit.tenants import key_maker

    with key_maker(url, migrate=True) as make:
        return {tenant: make(tenant) for tenant in tenants}


@contextlib.contextmanager
def _server(workdir: Path, hooks_port: int, flood_port: int) -> Iterator[tuple[str, int]]:
    env = {
        "ICLAUDIT_STATE_DIR": str(workdir),
        "ICLAUDIT_DATA_DIR": str(ROOT.parent / "shared" / "datasets"),
        "ICLAUDIT_AUTH_ENABLED": "true",
        "ICLAUDIT_DEFAULT_MODEL": "oracle",
        "HF_HUB_OFFLINE": "1",
        "ICLAUDIT_WEBHOOK_ALLOWLIST": (
            f'["http://127.0.0.1:{hooks_port}/hooks", "http://127.0.0.1:{flood_port}/hooks"]'
        ),
        "ICLAUDIT_ENDPOINT_ALLOWLIST": f'["http://127.0.0.1:{flood_port}/"]',
        "ICLAUDIT_WEBHOOK_TICK_SECONDS": "0.2",
    }
    port = free_port()
    proc = api_load._start([str(api_load.ICLAUDIT), "serve", "--port", str(port)], env, workdir / "api.log")
    try:
        wait_for_port(port, proc, "iclaudit serve", timeout=120)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        api_load._stop(proc)


def run() -> Iterator[dict]:
    with (
        tempfile.TemporaryDirectory(prefix="iclaudit-abuse-") as tmp,
        internal_server() as (hooks_port, hits),
    ):
        workdir = Path(tmp)
        keys = _keys(f"sqlite:///{workdir / 'iclaudit.db'}", ("good", "attacker"))
        flood_port = free_port()
        flood = multiprocessing.get_context("spawn").Process(
            target=_flood_main, args=(flood_port,), daemon=True
        )
        flood.start()
        try:
            deadline = time.monotonic() + 60
            while not _listening(flood_port) and time.monotonic() < deadline:
                time.sleep(0.1)
            with _server(workdir, hooks_port, flood_port) as (base, pid):
                yield from asyncio.run(_run(Bench(base, pid, keys, hooks_port, hits, flood_port, workdir)))
        finally:
            flood.kill()
            flood.join(10)
