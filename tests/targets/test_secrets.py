"""Target credentials by reference (issue 22 §4): the real target receives the secret, while the database
file, every API answer and every log line hold only its name."""

from __future__ import annotations

import json
import logging
import uuid
from pathlib import Path

from testkit.client import endpoint_request, wait_for
from testkit.target_server import Target, serve

SECRET = f"Bearer tgt-{uuid.uuid4().hex}"
TENANT_SECRET = f"tenant-{uuid.uuid4().hex}"


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
        app_client(
            endpoint_allowlist=[url + "/"], secrets_dir=secrets_dir, secrets_grants={"TARGET_KEY": ["alice"]}
        ) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        headers = {"Authorization": {"secret": "TARGET_KEY"}, "X-Target-Token": {"secret": "TENANT_KEY"}}
        submitted = client.post("/v1/audits", json=endpoint_request(url + "/", trials=20, headers=headers))
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
                "/v1/audits",
                json=endpoint_request(url, trials=20, headers=headers),
                headers={"Authorization": f"Bearer {key}"},
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
            json=endpoint_request(url, trials=20, headers={"X-Trace": "abc"}),
            headers={"Authorization": f"Bearer {alice}"},
        )
        assert ok.status_code == 202, ok.text
        client.post(f"/v1/audits/{ok.json()['id']}/cancel", headers={"Authorization": f"Bearer {alice}"})


def test_operator_secrets_are_granted_not_shared(app_client, make_key, monkeypatch) -> None:
    """An ICLAUDIT_SECRET_* value is usable only by the tenants ICLAUDIT_SECRETS_GRANTS names; for any
    other tenant the name is not set: the same 422 as an unknown name (no oracle of which names exist), at
    submit and in the running audit's resolver alike."""
    from app import secrets

    value = f"op-{uuid.uuid4().hex}"
    monkeypatch.setenv("ICLAUDIT_SECRET_OPKEY", value)
    monkeypatch.setenv("ICLAUDIT_SECRET_SHARED", value + "-shared")
    url = "http://127.0.0.1:9/"
    grants = {"OPKEY": ["alice"], "SHARED": ["*"]}
    with app_client(endpoint_allowlist=[url], secrets_grants=grants) as client:
        alice, bob = make_key("alice"), make_key("bob")

        def submit(key: str, name: str, chat: bool = False):
            if chat:
                body = {
                    "kind": "mia",
                    "dataset": "synthetic_records",
                    "target": {"url": url + "v1", "model": "m", "headers": {"X-Key": {"secret": name}}},
                    "mechanism": {"name": "none", "shots_per_partition": 2},
                    "attack": {"name": "likelihood", "threat_model": "white_box", "secret": "label"},
                }
            else:
                body = endpoint_request(url, trials=20, headers={"Authorization": {"secret": name}})
            return client.post("/v1/audits", json=body, headers={"Authorization": f"Bearer {key}"})

        for chat in (False, True):
            ungranted, unknown = submit(bob, "OPKEY", chat), submit(bob, "NOPEKEY", chat)
            assert ungranted.status_code == unknown.status_code == 422, ungranted.text
            a, b = ungranted.json()["error"], unknown.json()["error"]
            assert a["reason"] == b["reason"] == "SECRET_NOT_SET"
            assert json.dumps(a).replace("OPKEY", "NAME") == json.dumps(b).replace("NOPEKEY", "NAME")
            assert value not in ungranted.text
            for key, name in ((alice, "OPKEY"), (bob, "SHARED")):  # granted, and granted to every tenant
                ok = submit(key, name, chat)
                assert ok.status_code == 202, ok.text
                client.post(
                    f"/v1/audits/{ok.json()['id']}/cancel", headers={"Authorization": f"Bearer {key}"}
                )

    # the running audit's resolver applies the same grants
    resolve = secrets.resolver(tenant="bob", grants=grants)
    assert resolve("SHARED") == value + "-shared"
    messages = []
    for name in ("OPKEY", "NOPEKEY"):
        try:
            resolve(name)
        except secrets.MissingSecret as exc:
            messages.append(str(exc).replace(name, "NAME"))
    assert len(messages) == 2 and messages[0] == messages[1]
    assert secrets.resolver(tenant="alice", grants=grants)("OPKEY") == value


def test_the_scrubber_masks_every_form_of_a_value(caplog) -> None:
    """The forms a library's message takes: the raw value, stripped, its str and bytes repr (an h11
    'Illegal header value b"…\\n"'), its JSON string (a log line, a stored row), URL- and base64-encoded;
    in a log record's message and its traceback alike."""
    import base64
    from urllib.parse import quote

    from app import secrets

    token = uuid.uuid4().hex
    value = f"op-ünï-{token}\r\n"
    secrets.SCRUBBER.add(value)
    shown = [
        value,
        value.strip(),
        repr(value),
        repr(value.encode()),
        json.dumps(value),
        json.dumps(repr(value.encode())),
        quote(value, safe=""),
        base64.b64encode(value.encode()).decode(),
    ]
    for text in shown:
        clean = secrets.scrub(f"error: {text} (end)")
        assert token not in clean and secrets.MASK in clean, text
        assert base64.b64encode(value.encode()).decode() not in clean
    assert secrets.scrub_value({"error": {"message": repr(value.encode())}, "n": [value]}) == {
        "error": {"message": f"b'{secrets.MASK}'"},
        "n": [secrets.MASK],
    }
    from app.api.errors import error_response

    answer = error_response(422, f"a library said {value.encode()!r}").body.decode()
    assert token not in answer and secrets.MASK in answer  # an error answer passes through it too
    caplog.set_level(logging.INFO)
    try:
        raise ValueError(f"Illegal header value {value.encode()!r}")
    except ValueError:
        logging.getLogger("test").exception("sending %s failed", repr(value))
    assert "Illegal header value" in caplog.text and secrets.MASK in caplog.text
    assert token not in caplog.text
