"""Target credentials by reference (issue 22 §4): the real target receives the secret, while the database
file, every API answer and every log line hold only its name."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from service.client import wait_for
from target_server import Target, serve

SECRET = f"Bearer tgt-{uuid.uuid4().hex}"
TENANT_SECRET = f"tenant-{uuid.uuid4().hex}"


def audit_body(url: str, headers: dict) -> dict:
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "seed": 3,
        "epsilon": 1.0,
        "estimator": "direct",
        "trials": 20,
        "mechanism": {
            "name": "http_endpoint",
            "partitions": 4,
            "shots_per_partition": 2,
            "endpoint": {"url": url, "answer_path": "$.choices[0].text", "retries": 0, "headers": headers},
        },
        "attack": {"name": "canary_prompt", "threat_model": "black_box"},
    }


def test_secret_reaches_the_target_and_nothing_else(
    app_client, make_key, tmp_path: Path, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("ICLAUDIT_SECRET_TARGET_KEY", SECRET)
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    (secrets_dir / "alice.json").write_text(json.dumps({"TENANT_KEY": TENANT_SECRET}))
    target = Target()
    answers: list[str] = []
    with (
        serve(target.app()) as url,
        app_client(endpoint_allowlist=[url + "/"], secrets_dir=secrets_dir) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        headers = {"Authorization": {"secret": "TARGET_KEY"}, "X-Target-Token": {"secret": "TENANT_KEY"}}
        submitted = client.post("/v1/audits", json=audit_body(url + "/", headers))
        assert submitted.status_code == 202, submitted.text
        audit_id = submitted.json()["id"]
        done = wait_for(client.get, audit_id, timeout=120)
        assert done["state"] == "SUCCEEDED", done["error"]
        for path in (
            f"/v1/audits/{audit_id}",
            "/v1/audits",
            "/v1/audits?view=full",
            f"/v1/audits/{audit_id}/events",
        ):
            answer = client.get(path)
            assert answer.status_code == 200, path
            answers.append(answer.text)
        answers.append(submitted.text)
        assert done["request"]["mechanism"]["endpoint"]["headers"] == headers  # the references, as sent
    assert done["result"]["endpoint_calls"] == 40
    assert target.authorization == [SECRET] * 40  # the real target received it on every call
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("iclaudit.db*"))
    logs = caplog.text
    assert f"audit {audit_id}" in logs and "HTTP Request: POST" in logs  # the run's and the client's lines
    for value in (SECRET, TENANT_SECRET):
        assert value.encode() not in stored
        assert all(value not in text for text in answers)
        assert value not in logs
    assert "TARGET_KEY" in stored.decode("latin-1")  # the reference itself is stored


def test_literal_credentials_and_unknown_secrets_are_422_and_nothing_stored(
    app_client, make_key, tmp_path: Path
) -> None:
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    (secrets_dir / "alice.json").write_text(json.dumps({"TENANT_KEY": TENANT_SECRET}))
    url = "http://127.0.0.1:9/"
    with app_client(endpoint_allowlist=[url], secrets_dir=secrets_dir) as client:
        alice, bob = make_key("alice"), make_key("bob")
        cases = [
            (
                alice,
                {"Authorization": "Bearer literal"},
                "$.mechanism.endpoint.headers.Authorization",
                "by reference",
            ),
            (alice, {"X-Api-Key": "k"}, "$.mechanism.endpoint.headers.X-Api-Key", "by reference"),
            (
                alice,
                {"Authorization": {"secret": "NOPE"}},
                "$.mechanism.endpoint.headers.Authorization.secret",
                "'NOPE'",
            ),
            (
                bob,
                {"X-Token": {"secret": "TENANT_KEY"}},
                "$.mechanism.endpoint.headers.X-Token.secret",
                "TENANT_KEY",
            ),
        ]
        for key, headers, path, words in cases:
            response = client.post(
                "/v1/audits", json=audit_body(url, headers), headers={"Authorization": f"Bearer {key}"}
            )
            assert response.status_code == 422, response.text
            detail = response.json()["error"]["details"][0]
            assert detail["path"] == path and words in detail["message"]
            assert TENANT_SECRET not in response.text
        for key in (alice, bob):
            assert client.get("/v1/audits", headers={"Authorization": f"Bearer {key}"}).json()["audits"] == []
        # a plain, non-credential header stays a literal
        ok = client.post(
            "/v1/audits",
            json=audit_body(url, {"X-Trace": "abc"}),
            headers={"Authorization": f"Bearer {alice}"},
        )
        assert ok.status_code == 202, ok.text
        client.post(f"/v1/audits/{ok.json()['id']}/cancel", headers={"Authorization": f"Bearer {alice}"})
