"""Resume and retry only what failed (issue 22 §3) on the real app and a real target: a budget-stopped
endpoint audit and a target-outage audit each resume to the result of an uninterrupted run with the same
seed (against a fresh target with the same seed), and the target sees every request exactly as often as
the uninterrupted run sends it: 0 of the calls already answered are issued again. A 503 with
Retry-After is waited out."""

from __future__ import annotations

import json
import time
from pathlib import Path

from app.audit.kinds import mia
from app.audit.runtime import no_progress
from app.audit.standalone import local_context
from testkit.client import wait_for
from testkit.target_server import Target, serve

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TRIALS = 300


def endpoint_body(url: str, **extra: object) -> dict:
    body = json.loads((EXAMPLES / "mia-http-endpoint.json").read_text())
    body["mechanism"]["endpoint"].update(url=url, retries=0, timeout_s=5)
    return body | {"trials": TRIALS, "seed": 11} | extra


def science(result: dict) -> dict:
    """What the audit measured and concluded (not what it spent)."""
    keys = ("black_box", "verdict", "verdict_reason", "epsilon_detectable", "epsilon_lower", "trials")
    return {k: result.get(k) for k in keys}


def finish(client, response) -> dict:
    assert response.status_code == 202, response.text
    return wait_for(client.get, response.json()["id"], timeout=180)


def uninterrupted(app_client, make_key) -> tuple[dict, Target]:
    target = Target()
    with serve(target.app()) as url, app_client(endpoint_allowlist=[url + "/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('carol')}"
        done = finish(client, client.post("/v1/audits", json=endpoint_body(url + "/")))
    assert done["state"] == "SUCCEEDED", done["error"]
    return done["result"], target


def test_budget_stopped_and_outage_audits_resume_to_the_uninterrupted_result(app_client, make_key) -> None:
    reference, fresh = uninterrupted(app_client, make_key)
    assert sorted(fresh.seen.values()) == [TRIALS, TRIALS]  # C1's body and C0's, TRIALS calls each

    stopped_target, outage_target = Target(), Target(down_after=250)
    with (
        serve(stopped_target.app()) as stopped_url,
        serve(outage_target.app()) as outage_url,
        app_client(endpoint_allowlist=[stopped_url + "/", outage_url + "/"]) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        # budget-stopped at 250 calls, then resumed without the budget
        first = finish(
            client,
            client.post("/v1/audits", json=endpoint_body(stopped_url + "/", budget={"max_calls": 250})),
        )
        assert first["state"] == "SUCCEEDED" and first["result"]["stopped"]["cap"] == "max_calls"
        assert stopped_target.answered == 250
        resumed = finish(client, client.post(f"/v1/audits/{first['id']}/resume", json={"budget": None}))
        assert resumed["state"] == "SUCCEEDED", resumed["error"]
        assert resumed["request"]["budget"] is None and resumed["id"] != first["id"]
        assert resumed["result"]["endpoint_replayed"] == 250 and resumed["result"]["endpoint_calls"] == 350
        assert (
            stopped_target.seen == fresh.seen
        )  # every request as often as the uninterrupted run: none twice
        assert science(resumed["result"]) == science(reference)

        # the target goes down (503) after 250 answers: FAILED; back up, the resume sends only the rest
        failed = finish(client, client.post("/v1/audits", json=endpoint_body(outage_url + "/")))
        assert failed["state"] == "FAILED" and "HTTP 503" in failed["error"]["message"]
        assert outage_target.answered == 250
        outage_target.down, outage_target.down_after = False, None
        resumed = finish(client, client.post(f"/v1/audits/{failed['id']}/resume"))
        assert resumed["state"] == "SUCCEEDED", resumed["error"]
        assert resumed["result"]["endpoint_replayed"] == 250 and resumed["result"]["endpoint_calls"] == 350
        assert outage_target.seen == fresh.seen and outage_target.answered == 2 * TRIALS
        assert science(resumed["result"]) == science(reference)

        # only FAILED or budget-stopped audits resume
        conflict = client.post(f"/v1/audits/{resumed['id']}/resume")
        assert conflict.status_code == 409, conflict.text


def test_retry_after_is_honoured() -> None:
    target = Target(fail_first=1, retry_after=1.5)
    with serve(target.app()) as url:
        body = endpoint_body(url + "/", trials=5)
        body["mechanism"]["endpoint"]["retries"] = 1
        start = time.monotonic()
        result = mia.run(mia.Request.model_validate(body), local_context(progress=no_progress)).stored()
        elapsed = time.monotonic() - start
    assert target.refused == 1 and result["endpoint_calls"] == 10 and target.answered == 10
    assert elapsed >= 1.5  # the call waited what the target asked, not the 0.1 s back-off
