"""`until_answer`: the service follows an inconclusive audit's next step as a new audit, within the
request's seconds and steps, and says on the audit what it did (app/jobs/follow_up.py)."""

from __future__ import annotations

from testkit.client import underpowered_mia_request as underpowered
from testkit.client import wait_for


def test_the_next_step_runs_as_a_linked_audit_that_answers(client) -> None:
    first = client.post("/v1/audits", json=underpowered(max_seconds=300)).json()
    done = wait_for(client.get, first["id"])
    assert done["verdict"]["outcome"] == "inconclusive" and done["follows"] is None
    (step, *_) = done["result"]["next_steps"]
    second_id = done["followed_by"]
    assert second_id is not None
    assert (
        done["progress"]["message"]
        == f"inconclusive; took its next step as audit {second_id}: {step['text']}"
    )

    second = wait_for(client.get, second_id)
    assert second["follows"] == first["id"] and second["followed_by"] is None
    assert second["verdict"]["outcome"] == "consistent"
    request = second["request"]
    assert request["trials"] == step["set"]["trials"] > 25
    assert {k: v for k, v in request.items() if k not in ("trials", "until_answer", "budget")} == {
        k: v for k, v in done["request"].items() if k not in ("trials", "until_answer", "budget")
    }
    chain = request["until_answer"]
    assert chain["max_steps"] == 4 and 0 < chain["max_seconds"] < 300
    assert request["budget"]["max_seconds"] == chain["max_seconds"]  # the chain stops within its seconds
    listed = client.get("/v1/audits", params={"label": "pipeline=nightly"}).json()["audits"]
    assert {(a["id"], a["follows"], a["followed_by"]) for a in listed} == {
        (first["id"], None, second_id),
        (second_id, first["id"], None),
    }


def test_a_step_that_does_not_fit_the_seconds_left_is_not_taken(client) -> None:
    audit = client.post("/v1/audits", json=underpowered(max_seconds=0.001)).json()
    done = wait_for(client.get, audit["id"])
    assert done["verdict"]["outcome"] == "inconclusive" and done["followed_by"] is None
    message = done["progress"]["message"]
    assert message.startswith("inconclusive; until_answer took no step: set trials = ") and message.endswith(
        ", 0 s left"
    )
    assert len(client.get("/v1/audits").json()["audits"]) == 1


def test_no_step_is_taken_once_the_steps_are_spent(client) -> None:
    audit = client.post("/v1/audits", json=underpowered(max_seconds=300, max_steps=0)).json()
    done = wait_for(client.get, audit["id"])
    assert done["followed_by"] is None
    assert done["progress"]["message"] == "inconclusive; until_answer: no steps left to take"


def test_a_step_the_server_would_refuse_is_not_taken_and_says_why(app_client, make_key) -> None:
    with app_client(max_trials=500) as client:  # the step asks for ~1,200 trials
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        audit = client.post("/v1/audits", json=underpowered(max_seconds=300)).json()
        done = wait_for(client.get, audit["id"])
    assert done["followed_by"] is None
    message = done["progress"]["message"]
    assert message.startswith("inconclusive; until_answer took no step: trials is ")
    assert "above this service's maximum of 500 (ICLAUDIT_MAX_TRIALS)" in message


def test_an_answer_ends_the_chain(client) -> None:
    body = underpowered(max_seconds=300) | {"trials": 4000}
    done = wait_for(client.get, client.post("/v1/audits", json=body).json()["id"])
    assert done["verdict"]["outcome"] == "consistent"
    assert done["followed_by"] is None and "until_answer" not in done["progress"]["message"]


def test_a_bad_until_answer_is_422_at_its_field_and_nothing_is_stored(client) -> None:
    for bad, field in (
        ({"max_seconds": 0}, "max_seconds"),
        ({"max_seconds": 9, "max_steps": 21}, "max_steps"),
    ):
        answer = client.post("/v1/audits", json=underpowered(**bad))
        assert answer.status_code == 422
        error = answer.json()["error"]
        assert f"$.until_answer.{field}" in [d["path"] for d in error["details"]], error
    missing = client.post("/v1/audits", json=underpowered() | {"until_answer": {}})
    assert missing.status_code == 422 and "until_answer" in missing.text
    assert client.get("/v1/audits").json()["audits"] == []
