"""Cheap polling on the real app and both databases: ETag / 304, the `wait` long-poll, the `/events`
Server-Sent Events stream, the summary and full list views, and tenant isolation on each."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from app.api.state import state_of
from app.audit.stats.verdict import OUTCOMES
from app.db import audits as audit_rows
from app.db.models import Audit
from testkit.client import bound_request, long_mia_request, sse_events, verdict_request, wait_for
from testkit.held_endpoint import HeldEndpoint


def _sqlite_only(settings, why: str) -> None:
    """Logic that does not touch SQL differences runs once, on SQLite (the hub's query is covered on
    PostgreSQL by the events test)."""
    if settings.database_url.startswith("postgresql"):
        pytest.skip(why)


@pytest.fixture
def gate() -> Iterator[HeldEndpoint]:
    with HeldEndpoint() as held:
        yield held


@pytest.fixture
def app_client(app_client: Callable[..., Any], gate: HeldEndpoint) -> Callable[..., Any]:
    """The conftest's, with the gate's endpoint allowed; the gate opens before the app stops (a held audit
    ends and its worker is free)."""

    @contextmanager
    def open_client(**changes: Any) -> Iterator[TestClient]:
        with app_client(endpoint_allowlist=[gate.url], **changes) as c:
            try:
                yield c
            finally:
                gate.release()

    return open_client


def _hold_the_worker(client, gate: HeldEndpoint) -> dict[str, Any]:
    """An audit RUNNING, held by testkit/held_endpoint.py, on the single inline worker, so that audits
    submitted after it stay PENDING until the gate opens, however fast or busy the machine is."""
    running = client.post("/v1/audits", json=gate.request()).json()
    gate.wait_held()
    wait_for(client.get, running["id"], ("RUNNING",))
    return running


def _end(client, gate: HeldEndpoint, running: dict[str, Any]) -> None:
    """Cancel the held audit, open the gate, and wait for it to end CANCELLED."""
    client.post(f"/v1/audits/{running['id']}/cancel")
    gate.release()
    assert wait_for(client.get, running["id"])["state"] == "CANCELLED"


def _record_progress(client, audit_id: str, fraction: float) -> None:
    """Write the held audit's progress as its runner does (app.db.audits.record_progress, its attempt):
    the gated runner writes none while it waits."""
    with state_of(client.app).session_factory.begin() as session:
        attempt = session.execute(select(Audit.attempt).where(Audit.id == audit_id)).scalar_one()
        assert audit_rows.record_progress(
            session,
            audit_id=audit_id,
            attempt=attempt,
            stage="trials",
            fraction=fraction,
            eta_seconds=None,
            message="",
        )


def test_etag_and_304_follow_state_and_progress(client, gate) -> None:
    running = _hold_the_worker(client, gate)
    posted = client.post("/v1/audits", json=bound_request())
    queued = posted.json()
    first = client.get(f"/v1/audits/{queued['id']}")
    etag = first.headers["ETag"]
    assert posted.headers["ETag"] == etag  # the 202's ETag is the stored audit's
    assert first.status_code == 200 and etag.startswith('"') and first.json()["state"] == "PENDING"

    unchanged = client.get(f"/v1/audits/{queued['id']}", headers={"If-None-Match": etag})
    assert unchanged.status_code == 304 and unchanged.content == b"" and unchanged.headers["ETag"] == etag
    assert (
        client.get(f"/v1/audits/{queued['id']}", headers={"If-None-Match": f'"x", W/{etag}'}).status_code
        == 304
    )

    cancelled = client.post(f"/v1/audits/{queued['id']}/cancel").json()
    after = client.get(f"/v1/audits/{queued['id']}", headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.json() == cancelled and after.headers["ETag"] != etag

    # the running audit's ETag moves with its progress: one ETag per distinct progress written
    seen: dict[str, str] = {}
    for fraction in (0.25, 0.25, 0.5, 0.75, 0.75):
        _record_progress(client, running["id"], fraction)
        response = client.get(f"/v1/audits/{running['id']}")
        assert response.json()["progress"]["fraction"] == fraction
        seen.setdefault(response.headers["ETag"], json.dumps(response.json()["progress"], sort_keys=True))
    assert {json.loads(p)["fraction"] for p in seen.values()} == {0.25, 0.5, 0.75}, seen
    assert len(set(seen.values())) == len(seen), seen
    _end(client, gate, running)


def test_result_has_an_etag_and_304(client) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    done = wait_for(client.get, audit["id"])
    result = client.get(f"/v1/audits/{audit['id']}/result")
    assert result.status_code == 200 and result.json().items() <= done["result"].items()
    again = client.get(f"/v1/audits/{audit['id']}/result", headers={"If-None-Match": result.headers["ETag"]})
    assert again.status_code == 304 and again.content == b""


def test_long_poll_returns_on_change_and_times_out_unchanged(client, settings, gate) -> None:
    _sqlite_only(settings, "long-poll timing is the hub's, not the dialect's")
    running = _hold_the_worker(client, gate)
    queued = client.post("/v1/audits", json=bound_request()).json()
    path = f"/v1/audits/{queued['id']}"
    etag = client.get(path).headers["ETag"]

    start = time.monotonic()
    timed_out = client.get(path, params={"wait": "0.5s"})
    assert 0.5 <= time.monotonic() - start < 5
    assert timed_out.status_code == 200 and timed_out.headers["ETag"] == etag
    assert timed_out.json()["state"] == "PENDING"
    held = client.get(path, params={"wait": "0.3"}, headers={"If-None-Match": etag})
    assert held.status_code == 304 and held.content == b""

    answers: list[Any] = []
    poller = threading.Thread(
        target=lambda: answers.append(
            client.get(path, params={"wait": "30s"}, headers={"If-None-Match": etag})
        )
    )
    start = time.monotonic()
    poller.start()
    time.sleep(0.5)
    assert not answers  # still waiting
    client.post(f"{path}/cancel")
    poller.join(timeout=10)
    assert answers and answers[0].status_code == 200, answers
    assert answers[0].json()["state"] == "CANCELLED" and answers[0].headers["ETag"] != etag
    assert time.monotonic() - start < 5

    # a finished audit answers at once, whatever the wait
    start = time.monotonic()
    assert client.get(path, params={"wait": "30"}).json()["state"] == "CANCELLED"
    assert time.monotonic() - start < 2
    _end(client, gate, running)


def test_wait_out_of_bounds_is_422(client, settings) -> None:
    _sqlite_only(settings, "parameter validation")
    audit = client.post("/v1/audits", json=bound_request()).json()
    for wait in ("61s", "-1", "soon"):
        response = client.get(f"/v1/audits/{audit['id']}", params={"wait": wait})
        assert response.status_code == 422, (wait, response.text)
        assert response.json()["error"]["details"][0]["path"] == "query.wait"


def test_events_stream_state_changes_to_succeeded(client) -> None:
    audit = client.post("/v1/audits", json=long_mia_request(trials=300_000)).json()
    events = sse_events(client, audit["id"])
    states = [e["state"] for e in events]
    assert states[-1] == "SUCCEEDED" and "RUNNING" in states, states
    assert all(e["event"] == "audit" and e["id"] == audit["id"] for e in events)
    assert len({e["etag"] for e in events}) == len(events)  # each event is a change
    fractions = [e["progress"]["fraction"] for e in events if e["state"] == "RUNNING"]
    assert fractions == sorted(fractions)
    assert events[-1]["verdict"] is not None and "request" not in events[-1]
    assert client.get(f"/v1/audits/{audit['id']}").headers["ETag"] == events[-1]["etag"]
    # a finished audit: one event, then the end; with its last id as Last-Event-ID, none
    assert [e["state"] for e in sse_events(client, audit["id"])] == ["SUCCEEDED"]
    assert sse_events(client, audit["id"], **{"Last-Event-ID": events[-1]["etag"]}) == []


def test_list_summary_by_default_full_on_request(client) -> None:
    mia = client.post("/v1/audits", json=long_mia_request(trials=20_000)).json()
    bound = client.post("/v1/audits", json=bound_request()).json()
    for audit in (mia, bound):
        wait_for(client.get, audit["id"])
    summary = client.get("/v1/audits").json()["audits"]
    assert [a["id"] for a in summary] == [bound["id"], mia["id"]]
    for item in summary:
        assert "request" not in item and "result" not in item
        assert item["verdict"] is not None and item["updated_at"] == item["finished_at"]
    assert summary[1]["epsilon_claimed"] == 1.0 and isinstance(summary[1]["verdict"]["violation"], bool)
    assert summary[0]["epsilon_claimed"] is None and summary[0]["verdict"]["epsilon_lower"] > 0

    full = client.get("/v1/audits", params={"view": "full"}).json()["audits"]
    assert [a["id"] for a in full] == [bound["id"], mia["id"]]
    assert full[0] == client.get(f"/v1/audits/{bound['id']}").json()
    assert {k: v for k, v in full[1].items() if k not in ("request", "result")} == summary[1]
    assert client.get("/v1/audits", params={"view": "everything"}).status_code == 422

    spec = client.get("/openapi.json").json()
    listed = spec["paths"]["/v1/audits"]["get"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert {ref["$ref"].rsplit("/", 1)[1] for ref in listed["anyOf"]} == {"AuditSummaryList", "AuditList"}
    assert "304" in spec["paths"]["/v1/audits/{audit_id}"]["get"]["responses"]
    events = spec["paths"]["/v1/audits/{audit_id}/events"]["get"]["responses"]["200"]["content"]
    assert "text/event-stream" in events


def test_list_filters_on_the_results_verdict(client, make_key, gate) -> None:
    """`?verdict=` reads the stored result's `verdict` JSON field (`->>` on PostgreSQL, `json_extract` on
    SQLite), in both views, with the other filters and across pages; an unknown verdict is 422."""
    made = {o: client.post("/v1/audits", json=verdict_request(o)).json()["id"] for o in OUTCOMES}
    second_leak = client.post("/v1/audits", json=verdict_request("leak", labels={"run": "2"})).json()["id"]
    for audit_id in [*made.values(), second_leak]:
        wait_for(client.get, audit_id)
    running = _hold_the_worker(client, gate)  # no result yet: never matches a verdict
    bob = client.post(  # another tenant's leak is not listed
        "/v1/audits", json=verdict_request("leak"), headers={"Authorization": f"Bearer {make_key('bob')}"}
    ).json()["id"]

    for outcome, audit_id in made.items():
        expected = [second_leak, audit_id] if outcome == "leak" else [audit_id]
        summary = client.get("/v1/audits", params={"verdict": outcome}).json()["audits"]
        assert [a["id"] for a in summary] == expected, outcome
        assert all(a["verdict"]["outcome"] == outcome and a["verdict"]["headline"] for a in summary)
        assert all(
            a["verdict"]["violation"] is (outcome == "violation") for a in summary if outcome != "leak"
        )
        full = client.get("/v1/audits", params={"verdict": outcome, "view": "full"}).json()["audits"]
        assert [a["id"] for a in full] == expected
        assert all(a["result"]["verdict"] == outcome for a in full)
    consistent = client.get(f"/v1/audits/{made['consistent']}").json()["verdict"]
    assert 1 <= consistent["epsilon_detectable"] <= 2 and consistent["headline"].startswith("Consistent")
    assert bob not in {a["id"] for a in client.get("/v1/audits", params={"page_size": 500}).json()["audits"]}

    # with the other filters, and page by page
    both = {"verdict": "leak", "kind": "bound", "state": "SUCCEEDED"}
    assert [a["id"] for a in client.get("/v1/audits", params=both).json()["audits"]] == [
        second_leak,
        made["leak"],
    ]
    assert client.get("/v1/audits", params={"verdict": "leak", "kind": "mia"}).json()["audits"] == []
    assert client.get("/v1/audits", params={"verdict": "leak", "state": "RUNNING"}).json()["audits"] == []
    labelled = client.get("/v1/audits", params={"verdict": "leak", "label": "run=2"}).json()["audits"]
    assert [a["id"] for a in labelled] == [second_leak]
    first = client.get("/v1/audits", params={"verdict": "leak", "page_size": 1}).json()
    assert [a["id"] for a in first["audits"]] == [second_leak] and first["next_page_token"]
    rest = client.get(
        "/v1/audits", params={"verdict": "leak", "page_size": 1, "page_token": first["next_page_token"]}
    ).json()
    assert [a["id"] for a in rest["audits"]] == [made["leak"]] and rest["next_page_token"] is None
    unfiltered = [a["id"] for a in client.get("/v1/audits", params={"page_size": 500}).json()["audits"]]
    assert running["id"] in unfiltered and len(unfiltered) == 6

    bad = client.get("/v1/audits", params={"verdict": "pass"})
    assert bad.status_code == 422
    detail = bad.json()["error"]["details"][0]
    assert detail["path"] == "query.verdict" and "'inconclusive'" in detail["message"]
    _end(client, gate, running)


def test_other_tenant_gets_404_on_every_polling_route(client, make_key) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    done = client.get(f"/v1/audits/{audit['id']}")
    wait_for(client.get, audit["id"])
    etag = client.get(f"/v1/audits/{audit['id']}").headers["ETag"]
    bob = {"Authorization": f"Bearer {make_key('bob')}"}
    for path, params, headers in [
        (f"/v1/audits/{audit['id']}", {}, {"If-None-Match": etag}),
        (f"/v1/audits/{audit['id']}", {"wait": "1s"}, {}),
        (f"/v1/audits/{audit['id']}", {"wait": "1s"}, {"If-None-Match": "*"}),
        (f"/v1/audits/{audit['id']}/result", {}, {"If-None-Match": etag}),
        (f"/v1/audits/{audit['id']}/events", {}, {}),
    ]:
        response = client.get(path, params=params, headers={**bob, **headers})
        assert response.status_code == 404 and response.json()["error"]["status"] == "NOT_FOUND", path
        assert "ETag" not in response.headers
    for view in ("summary", "full"):
        assert client.get("/v1/audits", params={"view": view}, headers=bob).json()["audits"] == []
    assert done.status_code == 200


def test_waiting_holds_no_request_slot(app_client, make_key, settings, gate) -> None:
    """With 2 request slots (a request waits 0.5 s for one, then 503), 3 long-polls and an event stream
    waiting at once leave other requests free."""
    _sqlite_only(settings, "slots do not depend on the dialect")
    with app_client(api_concurrency=2, api_queue_seconds=0.5) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        running = _hold_the_worker(client, gate)
        queued = client.post("/v1/audits", json=bound_request()).json()
        path = f"/v1/audits/{queued['id']}"
        etag = client.get(path).headers["ETag"]
        answers: list[Any] = []
        waiters = [
            threading.Thread(
                target=lambda: answers.append(
                    client.get(path, params={"wait": "2s"}, headers={"If-None-Match": etag})
                )
            )
            for _ in range(3)
        ]
        waiters.append(threading.Thread(target=lambda: answers.append(sse_events(client, queued["id"]))))
        for thread in waiters:
            thread.start()
        time.sleep(0.5)
        start = time.monotonic()
        for _ in range(5):
            assert client.get("/v1/audits").status_code == 200
        assert time.monotonic() - start < 2 and not answers  # all answered 200 before the waits ended
        for _ in range(3):  # the long-polls time out unchanged
            waiters.pop(0).join(timeout=10)
        assert [a.status_code for a in answers] == [304, 304, 304]
        client.post(f"{path}/cancel")  # ends the stream
        waiters.pop().join(timeout=10)
        assert [e["state"] for e in answers[-1]] == ["PENDING", "CANCELLED"]
        _end(client, gate, running)
