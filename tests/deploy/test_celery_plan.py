"""With ICLAUDIT_EXECUTOR=celery a plan is computed by an `iclaudit worker` (task iclaudit.plan_audit on the
`plans` queue, its answer back through Redis), never by the API process; without a worker it is a 503."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from deploy.test_celery import api, stack, start_worker  # noqa: F401 - fixtures

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


def test_a_celery_plan_stops_when_its_caller_hangs_up(stack, start_worker, monkeypatch) -> None:  # noqa: F811
    """The API sets the plan's stop key when its caller goes away; the worker's check reads it and the task
    ends seconds later, not when its rehearsal of 40,000 pairs would (about 45 s on an idle 2-core machine)."""
    import httpx

    from app.config import Settings
    from app.main import create_app
    from testkit.servers import serve_in_thread

    limits = {"ICLAUDIT_PLAN_MAX_PAIRS": "40000", "ICLAUDIT_PLAN_TIMEOUT_SECONDS": "120"}
    for name, value in limits.items():
        monkeypatch.setitem(stack, name, value)
    worker = start_worker("w1")
    settings = Settings(
        **{k.removeprefix("ICLAUDIT_").lower(): v for k, v in stack.items() if k.startswith("ICLAUDIT_")}
    )
    body = json.loads((EXAMPLES / "likelihood-oracle-records.json").read_text())
    body["attack"] |= {"canaries": 200, "contexts": 200}
    with serve_in_thread(create_app(settings), "the API") as url:
        with pytest.raises(httpx.ReadTimeout):  # the caller gives up after 3 s and closes its connection
            httpx.post(f"{url}/v1/audits/plan", json=body, timeout=httpx.Timeout(60, read=3))
        log = worker.log  # type: ignore[attr-defined]
        deadline = time.monotonic() + 60
        while b"iclaudit.plan_audit" not in log.read_bytes() or b"succeeded in" not in log.read_bytes():
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    took = float(re.search(rb"plan_audit\[[^\]]+\] succeeded in ([0-9.]+)s", log.read_bytes()).group(1))
    assert took < 20, f"the plan ran {took:.1f} s after its caller hung up at 3 s"
