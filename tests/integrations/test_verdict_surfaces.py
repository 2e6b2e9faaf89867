"""One verdict digest on every surface: for a real audit of each outcome, GET /v1/audits/{id}, the list
(and its `verdict` filter), the audit.succeeded webhook, a sweep's child row, a schedule's run, MLflow's
tags and metrics and the CLI's --json show the same outcome, ε and violation — ResultBase.digest's."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from integrations.conftest import Receiver, live_server
from standardwebhooks import Webhook
from typer.testing import CliRunner

from app.audit.stats.verdict import OUTCOMES
from app.cli import _register, app
from app.config import Settings
from app.db.engine import make_engine, make_session_factory
from app.db.models import Audit, ScheduleRun, utcnow
from app.integrations import mlflow
from app.integrations.schedules import run_resource
from testkit.client import verdict_request, wait_for

SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
EXIT_CODES = {"violation": 1, "leak": 1, "inconclusive": 4, "consistent": 0}  # the CLI gate's


def _sweep_row(client: httpx.Client, sweep_id: str, timeout: float = 60.0) -> dict[str, Any]:
    """The one row of a finished one-point sweep's result table."""
    deadline = time.monotonic() + timeout
    while client.get(f"/v1/sweeps/{sweep_id}").json()["state"] != "SUCCEEDED":
        assert time.monotonic() < deadline, f"sweep {sweep_id} did not finish in {timeout}s"
        time.sleep(0.05)
    (row,) = client.get(f"/v1/sweeps/{sweep_id}/result").json()["rows"]
    return row


@SQLITE_ONLY
def test_every_surface_shows_the_same_verdict(
    settings: Settings, make_key: Callable[[str], str], receiver: Receiver
) -> None:
    key = make_key("alice")
    with (
        live_server(settings) as url,
        httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30) as client,
    ):
        hook = client.post("/v1/webhooks", json={"url": receiver.url, "events": ["audit.succeeded"]}).json()
        made = {o: client.post("/v1/audits", json=verdict_request(o)).json()["id"] for o in OUTCOMES}
        sweeps = {
            o: client.post(
                "/v1/sweeps", json={"base": verdict_request(o), "grid": {"confidence": [0.95]}}
            ).json()
            for o in OUTCOMES
        }
        shown = {o: wait_for(client.get, made[o], ("SUCCEEDED",))["verdict"] for o in OUTCOMES}
        rows = {o: _sweep_row(client, sweeps[o]["id"]) for o in OUTCOMES}
        children = {o: client.get(f"/v1/audits/{rows[o]['audit_id']}").json()["verdict"] for o in OUTCOMES}

        # each audit has the outcome its request is built for, with the result's own figures
        for outcome, digest in shown.items():
            result = client.get(f"/v1/audits/{made[outcome]}/result").json()
            assert digest["outcome"] == result["verdict"] == outcome
            assert digest["headline"] == result["headline"]
            assert digest["epsilon_lower"] == result["epsilon_lower"] is not None
            assert digest["epsilon_detectable"] == result["epsilon_detectable"]
        assert shown["violation"]["violation"] is True and shown["consistent"]["violation"] is False
        assert shown["inconclusive"]["violation"] is False and shown["inconclusive"]["epsilon_theory"] == 2
        assert shown["leak"]["violation"] is None and shown["leak"]["epsilon_theory"] is None

        listed = {a["id"]: a["verdict"] for a in client.get("/v1/audits?page_size=50").json()["audits"]}
        for outcome, audit_id in made.items():
            assert listed[audit_id] == shown[outcome]
            filtered = {a["id"] for a in client.get(f"/v1/audits?verdict={outcome}").json()["audits"]}
            assert filtered == {audit_id, rows[outcome]["audit_id"]}  # the audit and its sweep's child

        for outcome, row in rows.items():  # the child is the same request, so the same verdict
            assert children[outcome] == shown[outcome]
            assert {name: row[name] for name in shown[outcome]} == children[outcome]

        got = receiver.wait_for(2 * len(OUTCOMES))
        sent = {
            p["data"]["id"]: p["data"]["verdict"]
            for p in (Webhook(hook["secret"]).verify(m.body, m.headers) for m in got)
        }
        for outcome in OUTCOMES:
            assert sent[made[outcome]] == shown[outcome]
            assert sent[rows[outcome]["audit_id"]] == children[outcome]

        _register()
        runner = CliRunner()
        for outcome, audit_id in made.items():
            out = runner.invoke(app, ["watch", audit_id, "--json", "--url", url, "--api-key", key])
            assert out.exit_code == EXIT_CODES[outcome], out.output
            assert json.loads(out.stdout)["verdict"] == shown[outcome]

    engine = make_engine(settings.sqlalchemy_url)
    try:
        with make_session_factory(engine)() as session:
            for outcome, audit_id in made.items():
                audit = session.get(Audit, audit_id)
                assert audit is not None
                run = run_resource(ScheduleRun(fire_time=utcnow(), audit_id=audit_id, sweep_id=None), audit)
                assert (run.outcome, run.headline, run.violation) == (
                    shown[outcome]["outcome"],
                    shown[outcome]["headline"],
                    shown[outcome]["violation"],
                )
                tags = mlflow.tags_of(audit)
                assert tags["iclaudit.verdict"] == outcome
                assert tags["mlflow.note.content"] == shown[outcome]["headline"]
                metrics = mlflow.metrics_of(audit.kind, audit.result)
                assert metrics["epsilon_lower"] == shown[outcome]["epsilon_lower"]
    finally:
        engine.dispose()
