"""/v1/audits end to end on the embedded default's road (inline executor), both dialects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.audit.kinds.registry import KINDS
from testkit.client import bound_request, long_mia_request, wait_for
from testkit.held_endpoint import HeldEndpoint

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_submit_bound_runs_to_succeeded(client) -> None:
    response = client.post("/v1/audits", json=bound_request())
    assert response.status_code == 202
    audit = response.json()
    assert response.headers["Location"] == f"/v1/audits/{audit['id']}"
    assert audit["state"] in ("PENDING", "RUNNING", "SUCCEEDED") and audit["kind"] == "bound"
    assert audit["request"]["kind"] == "bound"

    done = wait_for(client.get, audit["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    assert done["progress"]["fraction"] == 1.0 and done["attempt"] == 1
    assert done["started_at"] and done["finished_at"] >= done["started_at"] >= done["created_at"]
    result = client.get(f"/v1/audits/{audit['id']}/result")
    assert result.status_code == 200 and result.json() == done["result"] and done["result"]


def test_same_seed_gives_the_same_result(client) -> None:
    ids = [client.post("/v1/audits", json=bound_request(seed=3)).json()["id"] for _ in range(2)]
    results = [wait_for(client.get, i)["result"] for i in ids]
    assert results[0] == results[1]


def test_cancel_running_audit_ends_cancelled(app_client, make_key) -> None:
    """Held RUNNING by testkit/held_endpoint.py, not by a trial count: the cancel reaches a running
    audit on any machine, which stops at its next progress check once its calls return."""
    with HeldEndpoint() as gate, app_client(endpoint_allowlist=[gate.url]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        audit = client.post("/v1/audits", json=gate.request()).json()
        gate.wait_held()
        assert client.get(f"/v1/audits/{audit['id']}").json()["state"] == "RUNNING"
        response = client.post(f"/v1/audits/{audit['id']}/cancel")
        assert response.status_code == 200 and response.json()["cancel_requested"] is True
        assert response.json()["state"] == "RUNNING"
        gate.release()
        done = wait_for(client.get, audit["id"], timeout=30)
        assert done["state"] == "CANCELLED" and done["result"] is None
        result = client.get(f"/v1/audits/{audit['id']}/result")
        assert result.status_code == 404 and "CANCELLED" in result.json()["error"]["message"]


def test_cancel_pending_audit_never_runs(app_client, make_key) -> None:
    with (
        HeldEndpoint() as gate,
        app_client(endpoint_allowlist=[gate.url]) as client,
    ):  # holds the inline worker
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        running = client.post("/v1/audits", json=gate.request()).json()
        gate.wait_held()
        queued = client.post("/v1/audits", json=bound_request()).json()
        cancelled = client.post(f"/v1/audits/{queued['id']}/cancel").json()
        assert cancelled["state"] == "CANCELLED"
        client.post(f"/v1/audits/{running['id']}/cancel")
        gate.release()
        wait_for(client.get, running["id"])
        assert client.get(f"/v1/audits/{queued['id']}").json()["attempt"] == 0


def test_cancel_finished_audit_is_a_conflict(client) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    wait_for(client.get, audit["id"], ("SUCCEEDED",))
    response = client.post(f"/v1/audits/{audit['id']}/cancel")
    assert response.status_code == 409 and "SUCCEEDED" in response.json()["error"]["message"]


@pytest.mark.parametrize("path", ["/v1/audits/{}", "/v1/audits/{}/result"])
def test_unknown_audit_is_404(client, path: str) -> None:
    response = client.get(path.format("0" * 32))
    assert response.status_code == 404 and response.json()["error"]["status"] == "NOT_FOUND"
    assert client.post("/v1/audits/nope/cancel").status_code == 404


def test_pagination_walks_every_audit_once_newest_first(client) -> None:
    ids = [client.post("/v1/audits", json=bound_request(seed=s)).json()["id"] for s in range(5)]
    seen, token, pages = [], None, 0
    while True:
        params = {"page_size": 2} | ({"page_token": token} if token else {})
        body = client.get("/v1/audits", params=params).json()
        seen += [a["id"] for a in body["audits"]]
        pages += 1
        token = body["next_page_token"]
        if token is None:
            break
    assert seen == ids[::-1] and pages == 3
    assert client.get("/v1/audits", params={"kind": "bound", "page_size": 500}).json()["audits"]
    assert client.get("/v1/audits", params={"kind": "mia"}).json()["audits"] == []


def test_list_filters_by_state(client) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    wait_for(client.get, audit["id"], ("SUCCEEDED",))
    assert [a["id"] for a in client.get("/v1/audits", params={"state": "SUCCEEDED"}).json()["audits"]] == [
        audit["id"]
    ]
    assert client.get("/v1/audits", params={"state": "FAILED"}).json()["audits"] == []


@pytest.mark.parametrize(
    ("params", "path"),
    [
        ({"page_token": "not-a-token"}, "query.page_token"),
        ({"page_size": 0}, "query.page_size"),
        ({"state": "DONE"}, "query.state"),
    ],
)
def test_bad_list_parameters_are_422(client, params: dict, path: str) -> None:
    response = client.get("/v1/audits", params=params)
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"] == path


BAD_BODIES = [
    pytest.param({"kind": "nope"}, "$.kind", "not an audit kind", id="unknown-kind"),
    pytest.param({"seed": 1}, "$.kind", "kind", id="missing-kind"),
    pytest.param(
        long_mia_request() | {"epsilon": 0}, "$.epsilon", "greater than or equal to", id="epsilon-zero"
    ),
    pytest.param(long_mia_request() | {"delta": 1.0}, "$.delta", "delta", id="delta-one"),
    pytest.param(
        long_mia_request() | {"trials": 10**9}, "$.trials", "ICLAUDIT_MAX_TRIALS", id="too-many-trials"
    ),
    pytest.param(
        long_mia_request() | {"llm_calls": 10**7}, "$.llm_calls", "llm_calls", id="too-many-llm-calls"
    ),
    pytest.param(
        long_mia_request() | {"dataset": "no-such-set"}, "$.dataset", "Unknown dataset", id="unknown-dataset"
    ),
    pytest.param(
        long_mia_request() | {"model": "no-such-model"}, "$.model", "Unknown model", id="unknown-model"
    ),
    pytest.param(long_mia_request() | {"colour": "red"}, "$.colour", "not a field", id="extra-field"),
    pytest.param(
        long_mia_request() | {"mechanism": {"name": "private_voting", "partitions": 0}},
        "$.mechanism.partitions",
        "greater than or equal to 1",
        id="nested-field",
    ),
    pytest.param(
        bound_request() | {"counts": {"tp": 1}}, "$.counts.fn", "required", id="missing-nested-field"
    ),
    pytest.param(
        long_mia_request() | {"attack": {"name": "copy_constrained"}},
        "$.attack.name",
        'use attack.name "copy" with mechanism.teacher_output "label_logprobs"',
        id="retired-constrained-attack",
    ),
    pytest.param(
        long_mia_request() | {"mechanism": {"name": "none", "teacher_output": "label_logprobs"}},
        "$.mechanism.teacher_output",
        "applies to private_voting only",
        id="teacher-output-without-teachers",
    ),
]


@pytest.mark.parametrize(("body", "path", "words"), BAD_BODIES)
def test_bad_request_is_422_with_path_and_nothing_stored(client, body: dict, path: str, words: str) -> None:
    if body.get("kind") == "mia" and "mia" not in KINDS:
        pytest.skip("the mia kind is not registered")
    response = client.post("/v1/audits", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["status"] == "INVALID_ARGUMENT"
    assert path in [d["path"] for d in error["details"]], error
    assert words.lower() in error["message"].lower()
    assert client.get("/v1/audits").json()["audits"] == []


def test_malformed_json_is_422(client) -> None:
    response = client.post(
        "/v1/audits", content=b'{"kind": "bound",', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert "not valid JSON" in response.json()["error"]["message"]
    assert client.get("/v1/audits").json()["audits"] == []


def test_openapi_shows_an_example_per_kind(client) -> None:
    spec = client.get("/openapi.json").json()
    examples = spec["paths"]["/v1/audits"]["post"]["requestBody"]["content"]["application/json"]["examples"]
    assert set(examples) == set(KINDS)
    assert client.get("/docs").status_code == 200


def test_health_and_readiness(client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200 and ready.json()["checks"] == {"database": "ok"}


def test_http_endpoint_outside_the_allow_list_is_refused(app_client, make_key) -> None:
    """A tenant cannot make the workers POST to an address the operator has not allowed (SSRF)."""
    body = json.loads((EXAMPLES / "mia-http-endpoint.json").read_text())
    body["mechanism"]["endpoint"]["url"] = "http://127.0.0.1:9/"
    with app_client() as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        response = client.post("/v1/audits", json=body)
        assert response.status_code == 422
        detail = response.json()["error"]["details"][0]
        assert detail["path"] == "$.mechanism.endpoint.url"
        assert "ICLAUDIT_ENDPOINT_ALLOWLIST" in detail["message"]
        assert client.get("/v1/audits").json()["audits"] == []
    with app_client(endpoint_allowlist=["http://127.0.0.1:9/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        response = client.post("/v1/audits", json=body)
        assert response.status_code == 202
        client.post(f"/v1/audits/{response.json()['id']}/cancel")
