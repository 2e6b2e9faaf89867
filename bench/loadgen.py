"""An HTTP load generator for loopback benchmarks (asyncio + aiohttp, one process, bounded in time).

- `open_loop`: requests start on a fixed schedule (request i at t0 + i/rate) whatever the server does;
  a request's latency is measured from its *scheduled* start, so a server that falls behind is charged
  for the queueing it causes (no coordinated omission).
- `closed_loop`: N clients, each sending its next request when the last one answered.
- `probe`: GET /healthz every `interval` seconds on its own connection, for the liveness figure.

Every answer other than 2xx, 304 and 429, and every exception or client time-out, is an error; 429 (a
limit answering as designed, with Retry-After) is counted apart as `throttled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import aiohttp
import numpy as np

TIMEOUT = aiohttp.ClientTimeout(total=30)


@dataclass
class Stats:
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    elapsed: float = 0.0

    @property
    def errors(self) -> int:
        return sum(n for s, n in self.statuses.items() if not (s.startswith("2") or s in ("304", "429")))

    def summary(self) -> dict[str, float | int | dict[str, int]]:
        ms = 1000 * np.asarray(self.latencies) if self.latencies else np.zeros(1)
        return {
            "requests": len(self.latencies),
            "achieved_rps": round(len(self.latencies) / self.elapsed, 1) if self.elapsed else 0.0,
            "p50_ms": round(float(np.percentile(ms, 50)), 2),
            "p99_ms": round(float(np.percentile(ms, 99)), 2),
            "max_ms": round(float(ms.max()), 2),
            "errors": self.errors,
            "throttled": self.statuses.get("429", 0),
            "statuses": dict(self.statuses),
        }


def session(connections: int, headers: dict[str, str] | None = None) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=connections), timeout=TIMEOUT, headers=headers
    )


async def _get(
    client: aiohttp.ClientSession, url: str, headers: dict[str, str], stats: Stats, started: float
) -> aiohttp.ClientResponse | None:
    try:
        async with client.get(url, headers=headers) as response:
            await response.read()
        stats.statuses[str(response.status)] += 1
        return response
    except (TimeoutError, aiohttp.ClientError) as exc:
        stats.statuses[type(exc).__name__] += 1
        return None
    finally:
        stats.latencies.append(time.perf_counter() - started)


async def open_loop(
    client: aiohttp.ClientSession,
    url_for: Callable[[int], str],
    headers: dict[str, str],
    rate: float,
    duration: float,
) -> Stats:
    """`rate` requests per second for `duration` seconds on a fixed schedule."""
    stats, tasks = Stats(), set()
    total = int(rate * duration)
    start = time.perf_counter() + 0.05
    sent = 0
    while sent < total:
        due = min(total, max(sent, int((time.perf_counter() - start) * rate) + 1))
        for i in range(sent, due):
            task = asyncio.create_task(_get(client, url_for(i), headers, stats, start + i / rate))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        sent = due
        await asyncio.sleep(max(0.0, start + sent / rate - time.perf_counter()))
    if tasks:
        await asyncio.wait(tasks)
    stats.elapsed = time.perf_counter() - start
    return stats


async def closed_loop(
    client: aiohttp.ClientSession,
    url_for: Callable[[int], str],
    headers: dict[str, str],
    clients: int,
    duration: float,
    if_none_match: bool = False,
) -> Stats:
    """`clients` pollers back to back for `duration` s, poller k on `url_for(k)` (a dashboard watching
    one audit); with `if_none_match` each sends the ETag it last saw (a conditional poll)."""
    stats = Stats()
    start = time.perf_counter()
    stop = start + duration

    async def poller(k: int) -> None:
        url, etag = url_for(k), None
        while time.perf_counter() < stop:
            sent = headers | ({"If-None-Match": etag} if if_none_match and etag else {})
            response = await _get(client, url, sent, stats, time.perf_counter())
            if response is not None and "ETag" in response.headers:
                etag = response.headers["ETag"]

    await asyncio.gather(*(poller(k) for k in range(clients)))
    stats.elapsed = time.perf_counter() - start
    return stats


@contextlib.asynccontextmanager
async def probe(base_url: str, interval: float = 0.5):
    """GET /healthz every `interval` s on a connection of its own while the block runs."""
    stats = Stats()
    done = asyncio.Event()

    async def loop() -> None:
        async with session(1) as client:
            while not done.is_set():
                await _get(client, f"{base_url}/healthz", {}, stats, time.perf_counter())
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(done.wait(), interval)

    task = asyncio.create_task(loop())
    try:
        yield stats
    finally:
        done.set()
        await task
