"""bench/loadgen.py on small inputs against a real aiohttp server on loopback: the open loop keeps its
schedule and charges a slow server for the queueing, the closed loop sends If-None-Match, and errors,
429s and client time-outs are counted apart."""

from __future__ import annotations

import asyncio
import time

from aiohttp import web

from bench import loadgen


async def _serve(handler) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/{tail:.*}", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    return runner, f"http://127.0.0.1:{port}"


def test_open_loop_keeps_the_schedule_and_counts_statuses() -> None:
    async def handler(request: web.Request) -> web.Response:
        status = {"/err": 500, "/busy": 429}.get(request.path, 200)
        return web.Response(status=status, text="x")

    async def main() -> loadgen.Stats:
        runner, base = await _serve(handler)
        paths = ["/ok", "/ok", "/err", "/busy"]
        try:
            async with loadgen.session(64) as client:
                return await loadgen.open_loop(
                    client, lambda i: base + paths[i % 4], {}, rate=200, duration=1.0
                )
        finally:
            await runner.cleanup()

    stats = asyncio.run(main())
    summary = stats.summary()
    assert summary["requests"] == 200 and 0.95 < stats.elapsed < 2.0
    assert stats.statuses == {"200": 100, "500": 50, "429": 50}
    assert summary["errors"] == 50 and summary["throttled"] == 50
    assert summary["p50_ms"] <= summary["p99_ms"] <= summary["max_ms"] < 1000


def test_open_loop_charges_a_slow_server_for_the_queue() -> None:
    """One connection, 50 ms per answer, 100 req/s asked: later requests wait, and their latency (from
    their scheduled start) grows far past 50 ms instead of hiding the backlog."""

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(0.05)
        return web.Response(text="x")

    async def main() -> loadgen.Stats:
        runner, base = await _serve(slow)
        try:
            async with loadgen.session(1) as client:
                return await loadgen.open_loop(client, lambda i: base, {}, rate=100, duration=0.3)
        finally:
            await runner.cleanup()

    stats = asyncio.run(main())
    assert stats.summary()["requests"] == 30 and stats.errors == 0
    assert stats.summary()["max_ms"] > 1000  # 30 × 50 ms served one at a time, scheduled over 0.3 s


def test_closed_loop_sends_if_none_match_and_probe_runs_alongside() -> None:
    seen: list[str | None] = []

    async def handler(request: web.Request) -> web.Response:
        if request.path == "/healthz":
            return web.Response(text="ok")
        seen.append(request.headers.get("If-None-Match"))
        if request.headers.get("If-None-Match") == '"v1"':
            return web.Response(status=304, headers={"ETag": '"v1"'})
        return web.Response(text="x", headers={"ETag": '"v1"'})

    async def main() -> tuple[loadgen.Stats, loadgen.Stats]:
        runner, base = await _serve(handler)
        try:
            async with loadgen.session(4) as client, loadgen.probe(base, interval=0.1) as health:
                stats = await loadgen.closed_loop(
                    client, lambda i: f"{base}/a", {}, clients=4, duration=0.5, if_none_match=True
                )
            return stats, health
        finally:
            await runner.cleanup()

    start = time.perf_counter()
    stats, health = asyncio.run(main())
    assert time.perf_counter() - start < 5
    assert stats.statuses["200"] == 4 and stats.statuses["304"] == len(seen) - 4 > 0
    assert seen.count(None) == 4 and stats.errors == 0
    assert len(health.latencies) >= 3 and health.errors == 0
