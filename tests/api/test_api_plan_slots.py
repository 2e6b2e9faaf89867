"""A plan rehearses the audit in a worker process (app/jobs/plans.py), never the API's: /healthz and polls
answer while it computes. A tenant gets one plan at a time (429 for a second one while the first is
computed), and other tenants are not held by it (issue 20 applied to issue 22's plan)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from app.api.connections import PlanSlots, plan_slots
from app.api.errors import TooManyRequests
from app.api.state import state_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_one_plan_per_tenant_at_a_time() -> None:
    slots = PlanSlots()
    with slots.hold("alice"):
        with pytest.raises(TooManyRequests) as refused, slots.hold("alice"):
            pass
        assert "one at a time" in refused.value.message and refused.value.retry_after >= 1
        with slots.hold("bob"):
            assert len(slots) == 2
    assert len(slots) == 0
    with slots.hold("alice"):  # released, also after the refusal
        pass


def test_a_second_plan_of_the_tenant_is_429_while_the_first_computes(app_client, make_key) -> None:
    body = json.loads((EXAMPLES / "mia-oracle-eps1.json").read_text()) | {"trials": 400_000}
    with app_client() as client:
        alice, bob = make_key("alice"), make_key("bob")
        answers: list[int] = []
        first = threading.Thread(
            target=lambda: answers.append(
                client.post(
                    "/v1/audits/plan", json=body, headers={"Authorization": f"Bearer {alice}"}
                ).status_code
            )
        )
        first.start()
        deadline = time.monotonic() + 60
        while not len(plan_slots) and first.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(plan_slots) == 1, "the first plan never started"
        second = client.post("/v1/audits/plan", json=body, headers={"Authorization": f"Bearer {alice}"})
        assert second.status_code == 429, second.text
        assert (
            int(second.headers["Retry-After"]) >= 1 and "one at a time" in second.json()["error"]["message"]
        )
        first.join(120)
        assert answers == [200]
        other = client.post(
            "/v1/audits/plan", json=body | {"trials": 1000}, headers={"Authorization": f"Bearer {bob}"}
        )
        assert other.status_code == 200, other.text


def test_a_plan_is_computed_in_the_plan_process_while_healthz_and_polls_answer(
    app_client, make_key, monkeypatch
) -> None:
    """With the plan process stopped (SIGSTOP), a plan stays unanswered while /healthz and a poll of an
    audit answer; continued, it answers. Planning in this process is made to fail, so the answer can only
    come from the worker."""
    import app.audit.plan

    def here(*args, **kwargs):
        raise AssertionError("a plan was computed in the API process")

    monkeypatch.setattr(app.audit.plan, "plan_request", here)
    bound = json.loads((EXAMPLES / "bound-counts.json").read_text())
    with app_client(plan_workers=1) as client:  # one plan process: the one stopped below
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        audit_id = client.post("/v1/audits", json=bound).json()["id"]
        assert client.post("/v1/audits/plan", json=bound).status_code == 200  # starts the plan process
        pid = state_of(client.app).planner.pid
        answers: list[int] = []
        body = json.loads((EXAMPLES / "mia-oracle-eps1.json").read_text()) | {"trials": 2000}
        planning = threading.Thread(
            target=lambda: answers.append(client.post("/v1/audits/plan", json=body).status_code)
        )
        os.kill(pid, signal.SIGSTOP)
        try:
            planning.start()
            deadline = time.monotonic() + 60
            while not len(plan_slots) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert len(plan_slots) == 1, "the plan never started"
            assert client.get("/healthz").status_code == 200
            assert client.get(f"/v1/audits/{audit_id}").status_code == 200
            assert answers == [] and planning.is_alive()  # both answered before the plan could
        finally:
            os.kill(pid, signal.SIGCONT)
        planning.join(300)
        assert answers == [200]
