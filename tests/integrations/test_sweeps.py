"""POST /v1/sweeps: one real mia audit (oracle engine) per grid point and seed, progress, cancel, the
aggregate table, CSV and PNG; a bad point is 422 naming its grid key; on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient
from PIL import Image

from testkit.client import verdict_request

# the logic of this test does not depend on the database; PostgreSQL runs the concurrency-bearing ones
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)


def mia_base(**changes: Any) -> dict[str, Any]:
    """A real membership audit of private voting on the oracle engine, exact estimator (under a second)."""
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "seed": 0,
        "mechanism": {"name": "private_voting", "partitions": 4, "shots_per_partition": 1},
        "epsilon": 1.0,
        "attack": {"name": "inquiry", "threat_model": "black_box"},
        "estimator": "exact",
        **changes,
    }


def wait_sweep(client: TestClient, sweep_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        sweep = client.get(f"/v1/sweeps/{sweep_id}").json()
        if sweep["completed_at"] is not None or all(
            c["state"] in ("SUCCEEDED", "FAILED", "CANCELLED") for c in sweep["children"]
        ):
            return sweep
        assert time.monotonic() < deadline, sweep["progress"]
        time.sleep(0.1)


def test_a_16_point_sweep_finishes_with_its_table_csv_and_plot(client: TestClient) -> None:
    body = {"base": mia_base(), "grid": {"epsilon": [1, 2, 4, 8], "mechanism.partitions": [2, 4]}, "seeds": 2}
    answer = client.post("/v1/sweeps", json=body, headers={"Idempotency-Key": "sweep-16"})
    assert answer.status_code == 202, answer.text
    sweep = answer.json()
    assert answer.headers["Location"] == f"/v1/sweeps/{sweep['id']}"
    assert sweep["progress"]["total"] == 16 and len(sweep["children"]) == 16
    points = [
        (c["point"]["epsilon"], c["point"]["mechanism.partitions"], c["seed"]) for c in sweep["children"]
    ]
    assert points == [(e, p, s) for e in (1, 2, 4, 8) for p in (2, 4) for s in (0, 1)]
    # a retry of the submit gives the same sweep, not 16 more audits
    again = client.post("/v1/sweeps", json=body, headers={"Idempotency-Key": "sweep-16"})
    assert again.json()["id"] == sweep["id"] and again.headers["Idempotent-Replayed"] == "true"

    done = wait_sweep(client, sweep["id"])
    assert done["state"] == "SUCCEEDED" and done["progress"]["fraction"] == 1.0
    assert done["progress"]["counts"] == {"SUCCEEDED": 16}
    child = client.get(f"/v1/audits/{done['children'][7]['audit_id']}").json()
    assert child["request"]["epsilon"] == 2 and child["request"]["mechanism"]["partitions"] == 4
    assert child["request"]["seed"] == 1

    table = client.get(f"/v1/sweeps/{sweep['id']}/result").json()
    assert len(table["rows"]) == 16 and len(table["points"]) == 8
    for row in table["rows"]:
        audit = client.get(f"/v1/audits/{row['audit_id']}").json()
        bound = audit["result"]["black_box"]
        assert row["epsilon_theory"] == audit["result"]["epsilon_theory"] == row["point"]["epsilon"]
        assert row["violation"] == audit["result"]["violation"]
        assert row["epsilon_lower"] == pytest.approx(bound["epsilon_lower"], rel=1e-12)  # the verdict's bound
        assert row["outcome"] == audit["result"]["verdict"] == audit["verdict"]["outcome"] == "consistent"
        assert row["headline"] == audit["result"]["headline"] and row["headline"].startswith("Consistent")
        assert row["epsilon_detectable"] == audit["result"]["epsilon_detectable"]
    for point in table["points"]:
        mine = [r["epsilon_lower"] for r in table["rows"] if r["point"] == point["point"]]
        assert point["audits"] == 2 and point["epsilon_lower_max"] == max(mine)
        assert abs(point["epsilon_lower_mean"] - sum(mine) / 2) < 1e-12
        assert point["outcome"] == "consistent" and point["outcomes"] == {"consistent": 2}
        assert point["headline"] == next(r["headline"] for r in table["rows"] if r["point"] == point["point"])

    lines = list(csv.reader(io.StringIO(client.get(f"/v1/sweeps/{sweep['id']}/result.csv").text)))
    assert lines[0][:4] == ["position", "epsilon", "mechanism.partitions", "seed"] and len(lines) == 17
    assert lines[0][6:] == [
        "epsilon_lower",
        "epsilon_theory",
        "violation",
        "outcome",
        "epsilon_detectable",
        "headline",
    ]
    assert float(lines[1][6]) == pytest.approx(table["rows"][0]["epsilon_lower"], rel=1e-12)
    first = table["rows"][0]
    assert lines[1][9:] == ["consistent", repr(first["epsilon_detectable"]), first["headline"]]

    png = client.get(f"/v1/sweeps/{sweep['id']}/result.png")
    assert png.status_code == 200 and png.headers["content-type"] == "image/png"
    image = Image.open(io.BytesIO(png.content))
    assert image.size[0] > 500 and len(set(image.convert("RGB").getdata())) > 50  # drawn, not blank


@SQLITE_ONLY
def test_a_bad_point_is_422_naming_its_grid_key_and_stores_nothing(client: TestClient) -> None:
    bad = {"base": mia_base(), "grid": {"epsilon": [1, -2]}}
    answer = client.post("/v1/sweeps", json=bad)
    assert answer.status_code == 422
    assert answer.json()["error"]["details"][0]["path"] == '$.grid["epsilon"]'
    assert "-2" in answer.json()["error"]["message"]
    missing = client.post("/v1/sweeps", json={"base": mia_base(), "grid": {"attack.nothing.here": [1]}})
    assert (
        missing.status_code == 422
        and missing.json()["error"]["details"][0]["path"] == '$.grid["attack.nothing.here"]'
    )
    too_many = client.post(
        "/v1/sweeps", json={"base": mia_base(), "grid": {"seed": list(range(64)), "epsilon": [1, 2, 3, 4, 5]}}
    )
    assert too_many.status_code == 422 and "ICLAUDIT_SWEEP_MAX_AUDITS" in too_many.json()["error"]["message"]
    assert client.get("/v1/sweeps").json()["sweeps"] == []
    assert client.get("/v1/audits").json()["audits"] == []


def test_cancel_cascades_to_every_child(client: TestClient) -> None:
    slow = mia_base(estimator="bootstrap", llm_calls=50, trials=400_000)
    sweep = client.post(
        "/v1/sweeps", json={"base": slow, "grid": {"epsilon": [1, 2, 4, 8]}, "seeds": 2}
    ).json()
    cancelled = client.post(f"/v1/sweeps/{sweep['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["cancel_requested"]
    done = wait_sweep(client, sweep["id"], timeout=60)
    assert done["state"] == "CANCELLED"
    assert (
        set(done["progress"]["counts"]) <= {"CANCELLED", "SUCCEEDED"}
        and done["progress"]["counts"]["CANCELLED"] >= 6
    )
    assert client.post(f"/v1/sweeps/{sweep['id']}/cancel").status_code == 409
    assert client.get(f"/v1/sweeps/{sweep['id']}/result").status_code == 200


@SQLITE_ONLY
def test_a_sweep_is_the_tenants_own(client: TestClient, make_key: Any) -> None:
    sweep = client.post("/v1/sweeps", json={"base": mia_base(), "grid": {"epsilon": [1]}}).json()
    bob = {"Authorization": f"Bearer {make_key('bob')}"}
    assert client.get(f"/v1/sweeps/{sweep['id']}", headers=bob).status_code == 404
    assert client.get("/v1/sweeps", headers=bob).json()["sweeps"] == []
    assert client.get(f"/v1/sweeps/{sweep['id']}/result", headers=bob).status_code == 404


def test_a_finished_sweep_says_when_its_last_child_finished_before_the_dispatch_tick() -> None:
    """The sweep's state and completed_at both come from its children: a poll between the last child's end and
    the tick that writes sweep.completed saw SUCCEEDED with completed_at null (the typed-client test caught it)."""
    from datetime import UTC, datetime, timedelta

    from app.db.models import Audit, AuditState, SweepChild
    from app.integrations.sweeps import completed_at

    start = datetime(2026, 1, 1, tzinfo=UTC)
    ended = [
        (SweepChild(), Audit(state=AuditState.SUCCEEDED, finished_at=start + timedelta(seconds=s)))
        for s in (3, 1)
    ]
    assert completed_at(ended) == start + timedelta(seconds=3)
    running = [*ended, (SweepChild(), Audit(state=AuditState.RUNNING, finished_at=None))]
    assert completed_at(running) is None and completed_at([]) is None


@SQLITE_ONLY
def test_rows_points_and_csv_carry_each_childs_verdict(client: TestClient) -> None:
    """A bound sweep (25 trials per side, perfectly separated) whose points are a violation (claim 0.05)
    and inconclusive (claim 2: beyond what 25 trials can certify): each row, point and CSV line has the
    child's outcome and headline beside `violation`."""
    body = {"base": verdict_request("inconclusive"), "grid": {"epsilon": [0.05, 2]}}
    sweep = client.post("/v1/sweeps", json=body).json()
    assert wait_sweep(client, sweep["id"])["state"] == "SUCCEEDED"
    table = client.get(f"/v1/sweeps/{sweep['id']}/result").json()
    assert [(r["point"]["epsilon"], r["outcome"], r["violation"]) for r in table["rows"]] == [
        (0.05, "violation", True),
        (2, "inconclusive", False),
    ]
    violation, inconclusive = table["rows"]
    assert violation["headline"].endswith(": violation") and violation["epsilon_detectable"] is None
    assert inconclusive["headline"].startswith("Inconclusive: 25 trials per side can certify at most")
    assert inconclusive["epsilon_detectable"] is None  # unbounded: no true ε up to 100 is flagged
    assert [(p["outcome"], p["outcomes"], p["violations"]) for p in table["points"]] == [
        ("violation", {"violation": 1}, 1),
        ("inconclusive", {"inconclusive": 1}, 0),
    ]
    lines = list(csv.DictReader(io.StringIO(client.get(f"/v1/sweeps/{sweep['id']}/result.csv").text)))
    assert [(x["outcome"], x["violation"], x["headline"]) for x in lines] == [
        ("violation", "True", violation["headline"]),
        ("inconclusive", "False", inconclusive["headline"]),
    ]


def test_a_points_verdict_is_its_most_severe_childs() -> None:
    """Over the seeds of one point: violation before leak before inconclusive before consistent; the
    headline is that child's; a child without a verdict (failed, or a kind without one) is left out."""
    from app.audit.standalone import run_request
    from app.db.models import Audit, AuditState, Sweep, SweepChild
    from app.integrations.sweeps import result

    results = {
        o: run_request(verdict_request(o)) for o in ("violation", "leak", "inconclusive", "consistent")
    }

    def child(seed: int, point: int, outcome: str | None) -> tuple[SweepChild, Audit]:
        state = AuditState.SUCCEEDED if outcome else AuditState.FAILED
        audit = Audit(id=f"a{point}{seed}", kind="bound", state=state, result=results.get(outcome or ""))
        return SweepChild(position=seed, point={"p": point}, seed=seed), audit

    points = {
        1: ["consistent", "inconclusive", "consistent"],
        2: ["leak", "consistent", "inconclusive"],
        3: ["inconclusive", "violation", "leak"],
        4: ["consistent", None],
        5: [None],
    }
    rows = [child(seed, p, o) for p, outcomes in points.items() for seed, o in enumerate(outcomes)]
    table = result(Sweep(id="s", grid={"p": list(points)}), rows)
    got = {p.point["p"]: (p.outcome, p.outcomes, p.headline) for p in table.points}
    assert got == {
        1: ("inconclusive", {"consistent": 2, "inconclusive": 1}, results["inconclusive"]["headline"]),
        2: ("leak", {"leak": 1, "consistent": 1, "inconclusive": 1}, results["leak"]["headline"]),
        3: ("violation", {"inconclusive": 1, "violation": 1, "leak": 1}, results["violation"]["headline"]),
        4: ("consistent", {"consistent": 1}, results["consistent"]["headline"]),
        5: (None, {}, None),
    }
    assert [r.outcome for r in table.rows] == [o for outcomes in points.values() for o in outcomes]
