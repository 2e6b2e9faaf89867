"""With ICLAUDIT_EXECUTOR=celery a plan is computed by an `iclaudit worker` (task iclaudit.plan_audit on the
`plans` queue, its answer back through Redis), never by the API process; without a worker it is a 503."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from service.test_celery import api, stack, start_worker  # noqa: F401 - fixtures

pytestmark = [pytest.mark.postgres, pytest.mark.redis]
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_a_celery_worker_computes_the_plan(api, start_worker, monkeypatch) -> None:  # noqa: F811
    import app.audit.plan
    import app.jobs.plans

    def here(*args, **kwargs):
        raise AssertionError("a plan was computed in the API process")

    monkeypatch.setattr(app.audit.plan, "plan_request", here)
    body = json.loads((EXAMPLES / "bound-counts.json").read_text()) | {"epsilon": 1.0}
    monkeypatch.setattr(app.jobs.plans, "PLAN_WAIT_SECONDS", 2)
    unanswered = api.post("/v1/audits/plan", json=body)  # no worker yet: nobody computes it
    assert unanswered.status_code == 503 and int(unanswered.headers["Retry-After"]) >= 1, unanswered.text

    monkeypatch.setattr(app.jobs.plans, "PLAN_WAIT_SECONDS", 120)
    start_worker("w1")
    answer = api.post("/v1/audits/plan", json=body)
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["kind"] == "bound" and plan["calls"]["model"] == 0 and plan["power"]["trials_needed"] > 4000
    assert api.get("/v1/audits").json()["audits"] == []  # nothing stored
