"""iclaudit.client against the service under a real uvicorn (SQLite; the logic does not depend on the
database): a sweep, webhooks and schedules come back as the API's own response models."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from integrations.conftest import Receiver, live_server
from integrations.test_sweeps import mia_base
from standardwebhooks import Webhook

from app.config import Settings
from app.db.constants import TERMINAL_STATES, AuditState
from app.schemas.schedules import ScheduleList, ScheduleResource, ScheduleRunResource
from app.schemas.sweeps import SweepList, SweepRequest, SweepResource, SweepResult
from app.schemas.webhooks import DeliveryResource, WebhookCreated, WebhookList, WebhookResource
from iclaudit.client import ApiError, Audit, IclauditClient, WaitTimeout

pytestmark = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)

BOUND = {"kind": "bound", "counts": {"tp": 60, "fn": 40, "fp": 40, "tn": 60}}
T = TypeVar("T")


@pytest.fixture
def api(settings: Settings, make_key: Callable[[str], str]) -> Iterator[IclauditClient]:
    with live_server(settings) as url, IclauditClient(url, api_key=make_key("alice")) as c:
        yield c


def until(read: Callable[[], T], done: Callable[[T], bool], timeout: float = 15.0) -> T:
    deadline = time.monotonic() + timeout
    while not done(value := read()):
        assert time.monotonic() < deadline, value
        time.sleep(0.1)
    return value


def test_a_sweep_round_trip_is_typed(api: IclauditClient) -> None:
    request = SweepRequest.model_validate({"base": mia_base(), "grid": {"epsilon": [1, 8]}})
    sweep = api.submit_sweep(request, idempotency_key="typed-sweep")
    assert isinstance(sweep, SweepResource) and sweep.progress.total == 2
    assert [c.point for c in sweep.children] == [{"epsilon": 1}, {"epsilon": 8}]
    assert api.submit_sweep(request, idempotency_key="typed-sweep").id == sweep.id  # a retry: one sweep

    seen: list[SweepResource] = []
    done = api.wait_sweep(sweep.id, timeout=60, on_update=seen.append)
    assert done.state == AuditState.SUCCEEDED and done.progress.counts == {AuditState.SUCCEEDED: 2}
    assert done.completed_at is not None and seen[-1] == done
    assert all(a != b for a, b in itertools.pairwise(seen))  # only changes are reported

    result = api.sweep_result(sweep.id)
    assert isinstance(result, SweepResult) and result.sweep_id == sweep.id
    assert [r.point for r in result.rows] == [{"epsilon": 1}, {"epsilon": 8}]
    for row in result.rows:
        audit = api.get(row.audit_id)
        assert audit.result is not None and audit.result.kind == "mia"
        assert row.epsilon_theory == audit.result.epsilon_theory == row.point["epsilon"]
        assert row.violation == audit.result.violation
        assert row.outcome == audit.outcome == audit.result.verdict and row.headline == audit.headline
    assert len(api.sweep_result_csv(sweep.id).splitlines()) == 3  # header + one line per child
    page = api.list_sweeps()
    assert isinstance(page, SweepList) and [s.id for s in page.sweeps] == [sweep.id]

    with pytest.raises(ApiError) as bad:
        api.submit_sweep({"base": mia_base(), "grid": {"epsilon": [-1]}})
    assert bad.value.status == 422 and bad.value.details[0][0] == '$.grid["epsilon"]'


def test_wait_sweep_times_out_with_the_last_state_and_a_cancel_is_typed(api: IclauditClient) -> None:
    grid = {"epsilon": [1, 2, 4, 8], "mechanism.partitions": [2, 4]}
    sweep = api.submit_sweep({"base": mia_base(), "grid": grid, "seeds": 4})  # 32 audits (~3 s), 2 workers
    with pytest.raises(WaitTimeout) as late:
        api.wait_sweep(sweep.id, timeout=0)
    assert isinstance(late.value.last, SweepResource) and late.value.last.id == sweep.id
    assert late.value.last.state not in TERMINAL_STATES and "still" in str(late.value)
    cancelling = api.cancel_sweep(sweep.id)
    assert isinstance(cancelling, SweepResource) and cancelling.cancel_requested
    ended = api.wait_sweep(sweep.id, timeout=30)
    assert ended.state == AuditState.CANCELLED and ended.progress.counts[AuditState.CANCELLED] >= 1


def test_webhooks_create_list_deliveries_redeliver_delete(api: IclauditClient, receiver: Receiver) -> None:
    hook = api.create_webhook(receiver.url, ["audit.succeeded"], description="ci")
    assert isinstance(hook, WebhookCreated) and hook.secret.startswith("whsec_")
    assert hook.events == ["audit.succeeded"] and hook.description == "ci"
    listed = api.list_webhooks()
    assert isinstance(listed, WebhookList) and [w.id for w in listed.webhooks] == [hook.id]
    assert "secret" not in listed.webhooks[0].model_dump()  # shown once, at creation
    got = api.get_webhook(hook.id)
    assert isinstance(got, WebhookResource) and got.url == receiver.url

    audit = api.wait(api.submit(BOUND).id, timeout=30)
    assert audit.state == "SUCCEEDED"
    first = receiver.wait_for(1)[0]
    event: dict[str, Any] = Webhook(hook.secret).verify(first.body, first.headers)
    assert event["type"] == "audit.succeeded" and event["data"]["id"] == audit.id

    log = until(
        lambda: api.webhook_deliveries(hook.id).deliveries,
        lambda ds: len(ds) == 1 and ds[0].state == "SUCCEEDED",
    )
    delivery = log[0]
    assert isinstance(delivery, DeliveryResource) and delivery.id == first.headers["webhook-id"]
    assert delivery.event_type == "audit.succeeded" and delivery.last_status == 204
    assert api.redeliver(hook.id, delivery.id).id == delivery.id
    assert receiver.wait_for(2)[1].headers["webhook-id"] == delivery.id  # the same id: receivers drop repeats

    api.delete_webhook(hook.id)
    assert api.list_webhooks().webhooks == []
    with pytest.raises(ApiError) as gone:
        api.get_webhook(hook.id)
    assert gone.value.status == 404


def test_schedules_create_list_runs_delete(api: IclauditClient) -> None:
    schedule = api.create_schedule(request=BOUND, interval_seconds=1)
    assert isinstance(schedule, ScheduleResource) and schedule.target == "audit"
    assert schedule.interval_seconds == 1 and schedule.cron is None and schedule.body["kind"] == "bound"
    listed = api.list_schedules()
    assert isinstance(listed, ScheduleList) and [s.id for s in listed.schedules] == [schedule.id]
    assert api.get_schedule(schedule.id).next_fire_at == schedule.next_fire_at

    runs = until(
        lambda: api.schedule_runs(schedule.id).runs,
        lambda rs: any(r.state == AuditState.SUCCEEDED for r in rs),
    )
    run = next(r for r in runs if r.state == AuditState.SUCCEEDED)
    assert isinstance(run, ScheduleRunResource) and run.sweep_id is None and run.audit_id is not None
    assert api.get(run.audit_id).kind == "bound"
    assert [r.fire_time for r in runs] == sorted((r.fire_time for r in runs), reverse=True)  # newest first

    api.delete_schedule(schedule.id)
    assert api.list_schedules().schedules == []
    with pytest.raises(ApiError) as bad:
        api.create_schedule(request=BOUND, cron="every night")
    assert bad.value.status == 422 and bad.value.details[0][0] == "$.cron"


ROOT = Path(__file__).resolve().parents[2]


def examples(root: Path = ROOT) -> dict[str, dict[str, Any]]:
    """The request per verdict that a new user tries (issue 18): plain ICL over records leaks; private
    voting at its claim with 400,000 trials is consistent; its planted bug is a violation; 25 trials
    cannot resolve a claim of 2."""
    read = lambda name: json.loads((root / "examples" / name).read_text())  # noqa: E731
    return {
        "leak": read("likelihood-oracle-records.json"),
        "consistent": read("mia-oracle-eps1.json"),
        "violation": read("mia-oracle-bug-noise-divided-by-t.json"),
        "inconclusive": {**read("mia-oracle-eps1.json"), "trials": 25, "epsilon": 2},
    }


def test_the_client_shows_each_verdict_and_lists_by_it(api: IclauditClient) -> None:
    made = {o: api.submit(body).id for o, body in examples().items()}
    done = {o: api.wait(audit_id, timeout=60) for o, audit_id in made.items()}
    for outcome, audit in done.items():
        assert audit.state == "SUCCEEDED" and audit.outcome == outcome == audit.result.verdict, audit.headline
        assert audit.digest is not None and audit.digest.outcome == outcome
        assert audit.headline == audit.result.headline == audit.digest.headline
        assert audit.failing is (outcome in ("violation", "leak"))
    # mechanism none claims nothing: its request stores no ε and the summary shows no claim
    assert "leaks" in done["leak"].headline and done["leak"].epsilon_claimed is None
    assert done["leak"].digest.violation is None and done["leak"].request["epsilon"] is None
    assert done["violation"].headline.endswith("against a claimed 1: violation")
    assert "25 trials per side" in done["inconclusive"].headline
    # the rule (app/audit/stats/verdict.py): consistent needs ε_detectable ≤ 2 × the claim; inconclusive misses it
    # (None: no true ε up to 100 would be flagged)
    assert done["inconclusive"].epsilon_detectable is None or done["inconclusive"].epsilon_detectable > 2 * 2
    assert 1 <= done["consistent"].epsilon_detectable <= 2 and done["consistent"].epsilon_claimed == 1

    for outcome, audit_id in made.items():
        page = api.list(verdict=outcome)
        assert [a.id for a in page.audits] == [audit_id]
        (listed,) = page.audits
        assert isinstance(listed, Audit) and listed.result is None  # the summary view: no result body
        assert listed.outcome == outcome and listed.headline == done[outcome].headline
        assert listed.epsilon_detectable == done[outcome].epsilon_detectable
    assert [a.id for a in api.iter_audits(verdict="leak", kind="mia")] == [made["leak"]]
    assert list(api.iter_audits(verdict="leak", kind="bound")) == []
    assert {a.outcome for a in api.iter_audits()} == set(made)
    with pytest.raises(ApiError) as bad:
        api.list(verdict="ok")
    assert bad.value.status == 422 and bad.value.details[0][0] == "query.verdict"
