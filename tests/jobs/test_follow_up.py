"""The request of a chain's next step (app/jobs/follow_up.py): the step's dotted fields set, the chain's
seconds and steps carried down, a budget capped at the seconds left."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from app.db.models import Audit
from app.jobs.follow_up import next_request, seconds_left, with_set
from testkit.client import underpowered_mia_request


def test_with_set_sets_dotted_paths_and_replaces_a_null_parent() -> None:
    body = {"trials": 25, "budget": None, "attack": {"name": "auto", "contexts": 4}}
    out = with_set(body, {"trials": 1181, "budget.max_calls": 15, "attack.contexts": 9})
    assert out == {"trials": 1181, "budget": {"max_calls": 15}, "attack": {"name": "auto", "contexts": 9}}
    assert body["budget"] is None and body["attack"]["contexts"] == 4  # the stored request is untouched


def finished(request: dict, seconds: float) -> Audit:
    created = datetime(2026, 11, 28, tzinfo=UTC)
    return Audit(
        kind=request["kind"],
        request=request,
        created_at=created,
        finished_at=created + timedelta(seconds=seconds),
    )


def test_the_next_request_carries_what_is_left_and_caps_the_budget() -> None:
    audit = finished(
        underpowered_mia_request(max_seconds=300, max_steps=3) | {"budget": {"max_seconds": 999}}, 40
    )
    left = seconds_left(audit)
    assert left == 260
    body = next_request(audit, {"set": {"trials": 1181}}, left)
    assert body["trials"] == 1181 and body["until_answer"] == {"max_seconds": 260, "max_steps": 2}
    assert body["budget"] == {"max_seconds": 260}
    tighter = finished(
        underpowered_mia_request(max_seconds=300) | {"budget": {"max_calls": 9, "max_seconds": 30}}, 40
    )
    assert next_request(tighter, {"set": {"trials": 50}}, 260)["budget"] == {
        "max_calls": 9,
        "max_seconds": 30,
    }


def test_a_kind_without_a_budget_gets_none() -> None:
    request = {"kind": "bound", "scores_in": [1.0], "scores_out": [0.0], "until_answer": {"max_seconds": 60}}
    body = next_request(finished(request, 1), {"set": {"confidence": 0.9}}, 59)
    assert "budget" not in body and body["confidence"] == 0.9
