"""Plans are bounded and cancellable: a plan's cost (record–context pairs to rehearse) is computed from the
request and refused past ICLAUDIT_PLAN_MAX_PAIRS before any rehearsal; a plan stops where it runs at its
deadline or when its caller hangs up; and another tenant's plan is answered while one computes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from app.api.connections import plan_slots
from app.api.state import state_of
from app.main import create_app
from testkit.servers import serve_in_thread

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BOUND = json.loads((EXAMPLES / "bound-counts.json").read_text())


def likelihood(canaries: int, contexts: int) -> dict:
    body = json.loads((EXAMPLES / "likelihood-oracle-records.json").read_text())
    body["attack"] |= {"canaries": canaries, "contexts": contexts}
    return body


def test_the_reported_plan_is_refused_before_any_rehearsal(client) -> None:
    start = time.monotonic()
    refused = client.post("/v1/audits/plan", json=likelihood(500, 1000))
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert (error["reason"], error["details"][0]["path"]) == ("SERVER_LIMIT", "$.attack.contexts"), error
    assert "500 × 1,000 = 500,000 pairs, above this service's 4,000" in error["message"]
    assert "ICLAUDIT_PLAN_MAX_PAIRS" in error["message"]
    assert time.monotonic() - start < 10
    assert state_of(client.app).planner is None  # no worker was asked
    many = client.post("/v1/audits/plan", json=likelihood(2000, 10))
    assert many.status_code == 422 and many.json()["error"]["details"][0]["path"] == "$.attack.canaries"


def _plan_in_thread(client, body: dict, key: str) -> tuple[threading.Thread, list]:
    answers: list = []

    def ask() -> None:
        started = time.monotonic()
        answer = client.post("/v1/audits/plan", json=body, headers={"Authorization": f"Bearer {key}"})
        answered = time.monotonic()
        answers.append((answer.status_code, answer.json(), answered - started, answered))

    thread = threading.Thread(target=ask)
    thread.start()
    deadline = time.monotonic() + 60
    while not len(plan_slots) and thread.is_alive() and time.monotonic() < deadline:
        time.sleep(0.01)
    return thread, answers


def test_another_tenants_plan_is_answered_while_one_computes_and_a_plan_stops_at_its_deadline(
    app_client, make_key
) -> None:
    # 40,000 pairs (allowed here: the default is 4,000) take ~45 s to plan on an idle 2-core machine
    with app_client(plan_timeout_seconds=10, plan_max_pairs=40_000) as client:
        alice, bob, carol = make_key("alice"), make_key("bob"), make_key("carol")
        warm = [_plan_in_thread(client, BOUND, key)[0] for key in (bob, carol)]  # both plan processes start
        for thread in warm:
            thread.join(300)
        pids = state_of(client.app).planner.pids
        assert len(pids) == 2
        slow, answers = _plan_in_thread(client, likelihood(200, 200), alice)
        other = client.post("/v1/audits/plan", json=BOUND, headers={"Authorization": f"Bearer {bob}"})
        bob_answered = time.monotonic()
        assert other.status_code == 200, other.text
        slow.join(300)
        ((status, body, _took, alice_answered),) = answers
        assert bob_answered < alice_answered, "bob's plan waited for alice's"
        assert status == 503, (_took, body)
        message = body["error"]["message"]
        assert "did not finish within 10 s (ICLAUDIT_PLAN_TIMEOUT_SECONDS) and was stopped" in message
        again = client.post("/v1/audits/plan", json=BOUND, headers={"Authorization": f"Bearer {alice}"})
        assert again.status_code == 200  # the plan stopped itself: its process lives on and plans again
        assert state_of(client.app).planner.pids == pids


def test_a_plan_stops_when_its_caller_hangs_up(settings, make_key) -> None:
    alice, bob = make_key("alice"), make_key("bob")
    # alice's plan: 40,000 pairs (allowed here), ~20 s on a fast idle 2-core machine, minutes on a loaded one;
    # 4,000 pairs (the default limit) took 2.1 s there, too close to her 2 s patience
    update = {"plan_workers": 1, "plan_timeout_seconds": 120, "plan_max_pairs": 40_000}
    app = create_app(settings.model_copy(update=update))
    with serve_in_thread(app, "the API") as url:
        warm = httpx.post(
            f"{url}/v1/audits/plan", json=BOUND, headers={"Authorization": f"Bearer {bob}"}, timeout=60
        )
        assert warm.status_code == 200, warm.text  # the one plan process is started
        with pytest.raises(httpx.ReadTimeout):  # alice gives up after 2 s and closes her connection
            httpx.post(
                f"{url}/v1/audits/plan",
                json=likelihood(200, 200),
                headers={"Authorization": f"Bearer {alice}"},
                timeout=httpx.Timeout(60, read=2),
            )
        started = time.monotonic()
        other = httpx.post(
            f"{url}/v1/audits/plan", json=BOUND, headers={"Authorization": f"Bearer {bob}"}, timeout=60
        )
        waited = time.monotonic() - started
        assert other.status_code == 200, other.text
        # bob's plan, behind alice's in the one plan process, waited only for it to stop
        assert waited < 15, f"bob's plan waited {waited:.1f} s"
        assert state_of(app).planner.pids == [state_of(app).planner.pid]  # stopped, not killed
