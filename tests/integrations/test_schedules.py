"""Schedules with two API processes (real uvicorn subprocesses on one SQLite file, and on the session's
real PostgreSQL): a cron every 2 s fires once per time, the runs are listed, and the deployed endpoint
turning leaky between runs fires one `audit.violation` (signed) with the previous verdict."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from integrations.conftest import Receiver
from sqlalchemy import select
from standardwebhooks import Webhook

from app.audit.icl.prompts import CONTEXTLEAK_CANARY
from app.audit.kinds.registry import verdict_of
from app.config import Settings
from app.db.engine import make_engine, make_session_factory
from app.db.models import Audit, ScheduleRun, utcnow
from testkit.servers import _die_with_parent, free_port, serve_in_thread, wait_for_port

# The two-process test is about concurrent firings, so it runs on both databases; the rest on SQLite.
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
BOTH_DATABASES = pytest.mark.parametrize(
    "database_url", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


class Deployment:
    """A deployed ICL system under audit: private (answers "0" whatever the context) or leaky (answers
    "1" exactly when the canary is in its context). Switched between schedule runs."""

    def __init__(self) -> None:
        self.leaky = False
        self.app = FastAPI()

        @self.app.post("/")
        def answer(ask: dict[str, Any]) -> dict[str, Any]:
            present = any(CONTEXTLEAK_CANARY in str(e) for e in ask.get("context", []))
            return {"choices": [{"text": "1" if self.leaky and present else "0"}]}


@contextmanager
def api_processes(n: int, env: dict[str, str], logs: Path) -> Iterator[list[str]]:
    """`n` API processes (`uvicorn app.main:create_app`) on one database, started together."""
    ports = [free_port() for _ in range(n)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "app.main:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
            ],
            env={**os.environ, **env},
            stdout=(logs / f"api-{port}.log").open("wb"),
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: _die_with_parent(signal.SIGKILL),
        )
        for port in ports
    ]
    try:
        for port, proc in zip(ports, procs, strict=True):
            wait_for_port(port, proc, "uvicorn", timeout=120)
        yield [f"http://127.0.0.1:{port}" for port in ports]
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGINT)
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@BOTH_DATABASES
def test_a_schedule_fires_once_per_time_with_two_api_processes(
    settings: Settings, make_key: Any, receiver: Receiver, tmp_path: Path
) -> None:
    deployment = Deployment()
    with serve_in_thread(deployment.app, "the deployment") as endpoint:
        env = {
            "ICLAUDIT_DATABASE_URL": settings.sqlalchemy_url,
            "ICLAUDIT_STATE_DIR": str(tmp_path),
            "ICLAUDIT_DATA_DIR": str(settings.data_dir),
            "ICLAUDIT_PRELOAD_MODELS": "false",
            "ICLAUDIT_INLINE_WORKERS": "1",  # one run at a time per process
            "ICLAUDIT_WEBHOOK_TICK_SECONDS": "0.2",
            "ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS": "1",  # the cron below fires every 2 s
            "ICLAUDIT_ENDPOINT_ALLOWLIST": f'["{endpoint}/"]',
            "ICLAUDIT_WEBHOOK_ALLOWLIST": f'["http://127.0.0.1:{receiver.port}/"]',
        }
        key = {"Authorization": f"Bearer {make_key('alice')}"}
        request = {
            "kind": "mia",
            "dataset": "ag_news",
            "mechanism": {
                "name": "http_endpoint",
                "endpoint": {"url": f"{endpoint}/", "answer_path": "$.choices[0].text"},
            },
            "epsilon": 1.0,
            "attack": {"name": "canary_prompt", "threat_model": "black_box"},
            "estimator": "direct",
            "trials": 40,
            "labels": {"pipeline": "nightly"},
        }
        with (
            api_processes(2, env, tmp_path) as (a, b),
            httpx.Client(base_url=a, headers=key, timeout=30) as api,
        ):
            hook = api.post("/v1/webhooks", json={"url": receiver.url, "events": ["audit.violation"]}).json()
            created = api.post("/v1/schedules", json={"request": request, "cron": "* * * * * */2"})
            assert created.status_code == 201, created.text
            schedule = created.json()
            assert (
                httpx.get(f"{b}/v1/schedules/{schedule['id']}", headers=key).json()["cron"]
                == schedule["cron"]
            )

            def runs() -> list[dict[str, Any]]:
                return api.get(f"/v1/schedules/{schedule['id']}/runs").json()["runs"]

            def wait_runs(pred: Any, timeout: float = 40) -> list[dict[str, Any]]:
                deadline = time.monotonic() + timeout
                while not pred(got := runs()):
                    assert time.monotonic() < deadline, got
                    time.sleep(0.2)
                return got

            private = wait_runs(lambda r: sum(x["state"] == "SUCCEEDED" for x in r) >= 2)
            assert all(x["violation"] is False for x in private if x["state"] == "SUCCEEDED")
            # an endpoint that answers "0" whatever the context gives the attack no signal: not a pass
            assert all(
                x["outcome"] == "inconclusive"
                and x["headline"].startswith("Inconclusive:")
                and "signal" in x["headline"]
                for x in private
                if x["state"] == "SUCCEEDED"
            )
            deployment.leaky = True
            leaked_after = max(datetime.fromisoformat(x["fire_time"]) for x in private)
            final = wait_runs(
                lambda r: any(
                    x["violation"] and datetime.fromisoformat(x["fire_time"]) > leaked_after for x in r
                )
            )
            got = receiver.wait_for(1)
    # both processes are stopped: read every run and audit from the database
    engine = make_engine(settings.sqlalchemy_url)
    with make_session_factory(engine)() as session:
        runs_stored = session.scalars(select(ScheduleRun).order_by(ScheduleRun.fire_time)).all()
        audits = session.scalars(select(Audit)).all()
    engine.dispose()
    times = [r.fire_time for r in runs_stored]
    assert len(times) == len(set(times)) >= 3  # each time fired once (2 private runs + 1 leaky at least)
    assert {r.schedule_id for r in runs_stored} == {schedule["id"]}
    assert all(t.second % 2 == 0 and t.microsecond == 0 for t in times)
    gaps = [(later - earlier).total_seconds() for earlier, later in itertools.pairwise(times)]
    assert all(g >= 2 and g % 2 == 0 for g in gaps), gaps
    assert sorted(r.audit_id for r in runs_stored) == sorted(a.id for a in audits)  # one audit per run
    assert {x["fire_time"] for x in final} <= {t.isoformat().replace("+00:00", "Z") for t in times}

    # Each change of verdict, in fire order over the runs whose alarms were decided, is sent once, whatever
    # order the two processes' runs ended in: (audit, previous run's violation, this run's).
    by_id = {a.id: a for a in audits}
    changes, before = [], None
    for run in (r for r in runs_stored if r.alarms_at is not None):
        audit = by_id[run.audit_id]
        if audit.state == "SUCCEEDED":
            digest = verdict_of(audit.kind, audit.result)
            now = digest.violation if digest is not None else None
            if now != bool(before):
                changes.append((audit.id, before, now))
            before = now
    violations = [Webhook(hook["secret"]).verify(m.body, m.headers) for m in receiver.got]
    sent = [
        (e["data"]["id"], e["data"]["previous_violation"], e["data"]["verdict"]["violation"])
        for e in violations
    ]
    assert got and len(sent) == len(set(sent)) and set(sent) <= set(changes), (sent, changes)
    assert any(previous is False and now is True for _, previous, now in sent)
    for event in violations:
        data = event["data"]
        assert data["schedule_id"] == schedule["id"] and data["labels"] == {"pipeline": "nightly"}
        if data["verdict"]["violation"]:
            assert data["previous_outcome"] == "inconclusive" and data["verdict"]["outcome"] == "violation"
    assert any(x["outcome"] == "violation" and x["headline"].endswith(": violation") for x in final)


@SQLITE_ONLY
def test_a_sweep_schedule_fires_sweeps_and_bad_schedules_are_422(client) -> None:
    bound = {"kind": "bound", "counts": {"tp": 60, "fn": 40, "fp": 40, "tn": 60}}
    sweep = {"base": bound, "grid": {"confidence": [0.9, 0.95]}}
    created = client.post("/v1/schedules", json={"sweep": sweep, "interval_seconds": 1})
    assert created.status_code == 201, created.text
    schedule = created.json()
    assert schedule["target"] == "sweep" and [
        s["id"] for s in client.get("/v1/schedules").json()["schedules"]
    ] == [schedule["id"]]
    deadline = time.monotonic() + 30
    while len(runs := client.get(f"/v1/schedules/{schedule['id']}/runs").json()["runs"]) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert client.delete(f"/v1/schedules/{schedule['id']}").status_code == 204
    for run in runs:
        assert run["audit_id"] is None and run["sweep_id"] is not None
        assert client.get(f"/v1/sweeps/{run['sweep_id']}").json()["progress"]["total"] == 2

    bad_cron = client.post("/v1/schedules", json={"request": bound, "cron": "every night"})
    assert bad_cron.status_code == 422 and bad_cron.json()["error"]["details"][0]["path"] == "$.cron"
    both = client.post("/v1/schedules", json={"request": bound, "sweep": sweep, "cron": "0 3 * * *"})
    assert both.status_code == 422
    bad_point = client.post(
        "/v1/schedules", json={"sweep": {"base": bound, "grid": {"confidence": [2]}}, "cron": "0 3 * * *"}
    )
    assert (
        bad_point.status_code == 422
        and bad_point.json()["error"]["details"][0]["path"] == '$.grid["confidence"]'
    )
    assert client.get("/v1/schedules").json()["schedules"] == []


@SQLITE_ONLY
def test_a_leaking_schedule_shows_its_outcome_and_fires_audit_leak_once(client, receiver: Receiver) -> None:
    """Each run lists its verdict (outcome, headline); `audit.leak` fires on the first leaking run and not
    again while the verdict stays a leak (a change of verdict is what a schedule's alarm reports)."""
    hook = client.post(
        "/v1/webhooks", json={"url": receiver.url, "events": ["audit.leak", "audit.violation"]}
    )
    secret = hook.json()["secret"]
    leaking = {"kind": "bound", "counts": {"tp": 2400, "fn": 1600, "fp": 1500, "tn": 2500}}  # nothing claimed
    schedule = client.post("/v1/schedules", json={"request": leaking, "interval_seconds": 1}).json()
    deadline = time.monotonic() + 30
    while True:
        runs = client.get(f"/v1/schedules/{schedule['id']}/runs").json()["runs"]
        if sum(r["state"] == "SUCCEEDED" for r in runs) >= 3:
            break
        assert time.monotonic() < deadline, runs
        time.sleep(0.1)
    # the schedule is left to run on: deleted, its runs go with it, and a run still in flight would then
    # be judged as an audit of its own
    done = [r for r in runs if r["state"] == "SUCCEEDED"]
    for run in done:
        assert run["outcome"] == "leak" and run["violation"] is None
        assert run["headline"] == client.get(f"/v1/audits/{run['audit_id']}").json()["result"]["headline"]
    first = min(done, key=lambda r: r["fire_time"])
    time.sleep(1.0)  # the listed runs' events are written (ten ticks); none after the first is an alarm
    alarms = [Webhook(secret).verify(m.body, m.headers) for m in receiver.got]
    assert [(e["type"], e["data"]["id"]) for e in alarms] == [("audit.leak", first["audit_id"])]
    data = alarms[0]["data"]
    assert data["schedule_id"] == schedule["id"] and data["previous_outcome"] is None
    assert data["verdict"]["outcome"] == "leak" and data["verdict"]["headline"].startswith("The system leaks")


def test_scheduled_runs_that_end_out_of_order_send_each_verdict_change_once(tmp_path: Path) -> None:
    """Alarms are decided in fire order: a run that ends before an earlier one waits for it, so runs of
    verdicts [inconclusive, violation, violation] ending in the order 3, 2, 1 send one audit.violation
    (for run 2, against run 1), not one per run judged against whatever had ended."""
    from app.audit.standalone import run_request
    from app.db import migrate
    from app.db.models import Schedule, Tenant, WebhookDelivery, WebhookEndpoint
    from app.integrations.webhooks import write_due_events
    from testkit.client import verdict_request

    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    sessions = make_session_factory(engine)
    results = {o: run_request(verdict_request(o)) for o in ("violation", "inconclusive")}
    start = datetime(2026, 1, 1, tzinfo=UTC)
    verdicts = ["inconclusive", "violation", "violation"]
    with sessions.begin() as session:
        session.add(Tenant(id="t", name="t"))
        session.flush()
        session.add(
            Schedule(id="s", tenant_id="t", target="audit", body={}, interval_seconds=1, next_fire_at=start)
        )
        session.add(
            WebhookEndpoint(id="w", tenant_id="t", url="http://receiver.test/", secret="whsec_x", events=[])
        )
        for i in range(3):
            session.add(Audit(id=f"a{i}", tenant_id="t", kind="bound", state="RUNNING", request={}))
            session.add(
                ScheduleRun(schedule_id="s", fire_time=start + timedelta(seconds=i), audit_id=f"a{i}")
            )

    def end(i: int) -> list[tuple[str, str | None]]:
        with sessions.begin() as session:
            audit = session.get(Audit, f"a{i}")
            assert audit is not None
            audit.state, audit.result, audit.finished_at = "SUCCEEDED", results[verdicts[i]], utcnow()
        write_due_events(sessions)
        with sessions() as session:
            rows = session.scalars(select(WebhookDelivery).order_by(WebhookDelivery.created_at)).all()
            return [
                (r.event_type, r.payload["data"]["id"]) for r in rows if r.event_type == "audit.violation"
            ]

    assert end(2) == []  # runs 1 and 2 have not ended: nothing to judge run 3 against yet
    assert end(1) == []  # run 1 still running
    alarms = end(0)
    assert alarms == [("audit.violation", "a1")]
    with sessions() as session:
        data = next(
            r.payload["data"]
            for r in session.scalars(select(WebhookDelivery))
            if r.event_type == "audit.violation"
        )
        assert data["previous_violation"] is False and data["previous_outcome"] == "inconclusive"
        assert all(r.alarms_at is not None for r in session.scalars(select(ScheduleRun)))
    engine.dispose()
