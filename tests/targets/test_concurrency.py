"""`endpoint.max_concurrency` (issue 22 §3) against a real local target: calls in flight at once are capped
(the peak counted at the target), 429s halve the concurrency once per event and Retry-After holds every
call back, the concurrency comes back additively, and none of it moves a number: the result, the stored
answers and where a budget stops are those of calls made one at a time with the same seed; a resume
re-issues none of the calls already answered. The speed-up is measured in bench/suites/endpoint.py."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from app.audit.kinds import mia
from app.audit.runtime import AuditError, no_progress
from app.audit.standalone import local_context
from testkit.client import wait_for
from testkit.target_server import Target, serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@dataclass
class Busy(Target):
    """The test target answering after a fixed `latency` (without blocking other calls), counting the calls
    in flight at each arrival (`log`: arrival, in flight then, status) and at most (`peak`), and answering
    its first `throttle_first` calls 429 with Retry-After, all at once when the last of them has come (so
    they were all sent before any was refused: one congestion event)."""

    latency: float = 0.0
    throttle_first: int = 0
    in_flight: int = 0
    peak: int = 0
    log: list[tuple[float, int, int]] = field(default_factory=list)

    def app(self) -> FastAPI:
        api = super().app()
        all_came = asyncio.Event()

        @api.middleware("http")
        async def measure(request: Request, call_next: Callable) -> Any:
            with self.lock:
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
                arrival = (time.monotonic(), self.in_flight)
            status = 500
            try:
                await asyncio.sleep(self.latency)
                with self.lock:
                    refuse = self.throttle_first > 0
                    self.throttle_first -= refuse
                    self.refused += refuse
                    if self.throttle_first == 0:
                        all_came.set()
                if refuse:
                    await all_came.wait()
                    response = JSONResponse(
                        {"error": "slow down"},
                        status_code=429,
                        headers={"Retry-After": f"{self.retry_after:g}"},
                    )
                else:
                    response = await call_next(request)
                status = response.status_code
                return response
            finally:
                with self.lock:
                    self.in_flight -= 1
                    self.log.append((*arrival, status))

        return api


class Store:
    """An in-memory response store that keeps every `put` in the order it came."""

    def __init__(self) -> None:
        self.answers: dict[str, Any] = {}
        self.puts: list[list[str]] = []

    def get(self, keys: Iterable[str]) -> dict[str, Any]:
        return {k: self.answers[k] for k in keys if k in self.answers}

    def put(self, answers: Mapping[str, Any]) -> None:
        self.puts.append(list(answers))
        for key, value in answers.items():
            self.answers.setdefault(key, value)

    def recorded(self) -> list[list[tuple[int, str, Any]]]:
        """Every put in order, as (request, occurrence, answer): the request numbered by first appearance,
        since a key's digest covers the URL and each test target has its own port."""
        order: dict[str, int] = {}
        out = []
        for keys in self.puts:
            rows = []
            for key in keys:
                digest, occurrence = key.split("#")
                rows.append((order.setdefault(digest, len(order)), occurrence, self.answers[key]))
            out.append(rows)
        return out


def body(url: str, trials: int, concurrency: int, **extra: Any) -> dict:
    """The example endpoint audit; `{trial}` in the body, so the seeded target answers each trial alike
    whatever order the calls reach it in."""
    out = json.loads((EXAMPLES / "mia-http-endpoint.json").read_text())
    out["mechanism"]["endpoint"].update(
        url=url + "/",
        body={"context": "{context}", "query": "{query}", "trial": "{trial}"},
        retries=2,
        timeout_s=10,
        max_concurrency=concurrency,
    )
    return out | {"trials": trials, "seed": 5} | extra


def audit(url: str, trials: int, concurrency: int, store: Store | None = None, **extra: Any) -> dict:
    ctx = dataclasses.replace(local_context(progress=no_progress), responses=store)
    return mia.run(mia.Request.model_validate(body(url, trials, concurrency, **extra)), ctx).stored()


def science(result: dict) -> dict:
    """What the audit measured and concluded (a budget's message included: it holds no wall time)."""
    keys = ("black_box", "verdict", "verdict_reason", "epsilon_lower", "trials", "evidence", "stopped")
    return {k: result.get(k) for k in keys}


@pytest.fixture(scope="module")
def sequential() -> tuple[dict, Store, Busy]:
    """40 trials a context, one call at a time."""
    target, store = Busy(latency=0.05), Store()
    with serve(target.app()) as url:
        result = audit(url, 40, 1, store)
    return result, store, target


def test_concurrent_calls_give_the_sequential_result_with_at_most_max_concurrency_in_flight(
    sequential,
) -> None:
    reference, reference_store, one = sequential
    target, store = Busy(latency=0.05), Store()
    with serve(target.app()) as url:
        result = audit(url, 40, 4, store)
    assert one.peak == 1 and target.peak == 4  # the cap, reached and never passed
    assert result["endpoint_calls"] == target.answered == 80
    assert science(result) == science(reference)
    assert store.recorded() == reference_store.recorded()  # the same answers, stored in trial order


def test_429s_halve_the_concurrency_once_and_retry_after_holds_every_call(sequential) -> None:
    reference = sequential[0]
    # the first 4 calls (all in flight together) are refused: 429, Retry-After 0.5 s
    target = Busy(latency=0.2, throttle_first=4, retry_after=0.5)
    with serve(target.app()) as url:
        result = audit(url, 40, 4)
    log = sorted(target.log)
    refused, after = log[:4], log[4:]
    assert [status for _, _, status in refused] == [429] * 4 and max(n for _, n, _ in refused) == 4
    assert all(status == 200 for _, _, status in after) and target.refused == 4
    # nothing reached the target before the 429s' replies (0.2 s) plus the Retry-After (0.5 s) were over
    assert after[0][0] - refused[-1][0] >= 0.2 + 0.5 - 0.05
    # the four 429s were one congestion event: 4 → 2 in flight (not 4 → 1); 1/limit a reply brings it back
    first_round = [n for _, n, _ in after[:4]]
    assert max(first_round) == 2, first_round
    assert max(n for _, n, _ in after) == 4
    assert result["endpoint_calls"] == 80 and science(result) == science(reference)


def test_a_budget_stops_at_the_same_trial_and_the_resume_re_issues_nothing() -> None:
    """150 trials, max_calls 250: C1 and C0 calls interleaved, both stop after 125 pairs."""
    runs = {}
    for concurrency in (1, 4):
        target, store = Target(), Store()
        with serve(target.app()) as url:
            stopped = audit(url, 150, concurrency, store, budget={"max_calls": 250})
            answered = target.answered
            resumed = audit(url, 150, concurrency, store)
        runs[concurrency] = (stopped, resumed, store)
        assert answered == 250 and stopped["stopped"]["cap"] == "max_calls" and stopped["trials"] == 125
        assert resumed["endpoint_replayed"] == 250 and resumed["endpoint_calls"] == 50
        assert target.answered == 300 and set(target.seen.values()) == {1}  # no call answered twice
    (stopped_1, resumed_1, store_1), (stopped_4, resumed_4, store_4) = runs[1], runs[4]
    assert science(stopped_4) == science(stopped_1) and science(resumed_4) == science(resumed_1)
    assert store_4.recorded() == store_1.recorded()


def test_through_the_service_a_budget_stopped_concurrent_audit_resumes_to_the_sequential_result(
    app_client, make_key
) -> None:
    """The service's path (egress client per worker, responses in the database): 150 trials at 4 in flight,
    stopped at 250 calls, resumed without the budget, equals the uninterrupted sequential run through the
    service; the target answers every call once."""
    reference, target = Target(), Busy(latency=0.01)
    with (
        serve(reference.app()) as reference_url,
        serve(target.app()) as url,
        app_client(endpoint_allowlist=[reference_url + "/", url + "/"]) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"

        def finish(response) -> dict:
            assert response.status_code == 202, response.text
            return wait_for(client.get, response.json()["id"], timeout=180)

        expected = finish(client.post("/v1/audits", json=body(reference_url, 150, 1)))
        assert expected["state"] == "SUCCEEDED", expected["error"]
        stopped = finish(client.post("/v1/audits", json=body(url, 150, 4, budget={"max_calls": 250})))
        assert stopped["state"] == "SUCCEEDED" and stopped["result"]["stopped"]["cap"] == "max_calls"
        assert target.answered == 250 and target.peak == 4
        done = finish(client.post(f"/v1/audits/{stopped['id']}/resume", json={"budget": None}))
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["result"]["endpoint_replayed"] == 250 and done["result"]["endpoint_calls"] == 50
    assert target.answered == 300 and set(target.seen.values()) == {1}
    assert science(done["result"]) == science(expected["result"])


def test_throttle_is_aimd_once_per_congestion_event() -> None:
    """The arithmetic behind the back-off: a 429 halves concurrency and rate once per epoch (a stale reply
    does not halve again), Retry-After sets the pause every send waits for, answers win back 1/limit of
    concurrency and a tenth of the rate each, up to what was asked; other failures change nothing."""
    from app.audit.mechanisms.http_endpoint import Throttle

    throttle = Throttle(4, rate=10.0)
    epochs = [throttle.send(paced=False) for _ in range(4)]
    assert throttle.in_flight == throttle.peak == 4 and epochs == [0] * 4
    before = time.monotonic()
    throttle.received(429, epochs[0], 0.5)
    throttle.received(429, epochs[1], None)  # sent before the decrease: the same event
    assert (throttle.limit, throttle.rate, throttle.decreases, throttle.allowed) == (2.0, 5.0, 1, 2)
    assert throttle.pause_until >= before + 0.5
    throttle.received(500, epochs[2], None)  # not congestion: no change
    throttle.received(200, epochs[3], None)
    assert throttle.limit == 2.5 and throttle.rate == 6.0 and throttle.in_flight == 0
    for _ in range(20):
        epoch = throttle.send(paced=False)
        throttle.received(200, epoch, None)
    assert throttle.limit == 4.0 and throttle.rate == 10.0  # back to what was asked, no further
    assert time.monotonic() >= before + 0.5  # those sends waited out the Retry-After
    throttle.received(503, throttle.send(paced=False), None)  # a 503 is congestion too
    assert throttle.limit == 2.0 and throttle.rate == 5.0 and throttle.decreases == 2


def test_a_call_that_raises_frees_its_slot() -> None:
    """Any exception out of the client (not only httpx's) gives the slot back: a slot kept would leave the
    other workers waiting for ever."""
    from app.audit.mechanisms.base import claimed_theory
    from app.audit.mechanisms.http_endpoint import HttpEndpoint

    class Broken:
        def request(self, *args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("not a transport error")

    endpoint = HttpEndpoint(
        url="http://127.0.0.1:9/",
        body={},
        answer_path="a",
        theory=claimed_theory(1.0, 1e-5),
        max_concurrency=1,
    )
    for _ in range(2):  # the second call gets the one slot the first one held
        with pytest.raises(RuntimeError):
            endpoint._post(Broken(), {}, url=endpoint.url)
        assert endpoint.throttle.in_flight == 0


def test_an_outage_under_concurrency_keeps_every_answer_and_the_resume_sends_only_the_rest(
    sequential,
) -> None:
    """The target goes down (503) after 50 answers while 4 calls are in flight: the audit fails on the
    earliest failed trial, every answer it got is stored (those after a gap too), and back up, the resume
    replays them all and sends only the rest, to the sequential run's result."""
    reference = sequential[0]
    target, store = Busy(latency=0.02, down_after=50), Store()
    with serve(target.app()) as url:
        with pytest.raises(AuditError, match="HTTP 503"):
            audit_no_retries(url, store)
        assert target.answered == 50 and len(store.answers) == 50
        target.down, target.down_after = False, None
        resumed = audit_no_retries(url, store)
    assert resumed["endpoint_replayed"] == 50 and resumed["endpoint_calls"] == 30
    assert target.answered == 80 and set(target.seen.values()) == {1}
    assert science(resumed) == science(reference)


def audit_no_retries(url: str, store: Store) -> dict:
    """40 trials a context at 4 in flight, a failed call not retried."""
    request = body(url, 40, 4)
    request["mechanism"]["endpoint"]["retries"] = 0
    ctx = dataclasses.replace(local_context(progress=no_progress), responses=store)
    return mia.run(mia.Request.model_validate(request), ctx).stored()
