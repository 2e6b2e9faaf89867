"""SSRF through `http_endpoint` audits (issue 11): each bypass of the old string-prefix allow-list is a 422
at submit, and an audit whose listed host resolves to, or redirects to, an internal address never
reaches it; the tenant never sees an internal reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testkit.client import wait_for
from testkit.internal_server import SECRET, internal_server
from testkit.servers import fresh_database

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: the checks are the same on either dialect."""
    return fresh_database("sqlite", tmp_path)


def endpoint_audit(url: str, trials: int = 4) -> dict:
    body = json.loads((EXAMPLES / "mia-http-endpoint.json").read_text())
    body["mechanism"]["endpoint"].update(url=url, retries=0, timeout_s=5)
    body["trials"] = trials
    return body


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com.attacker.test/",
        "https://api.example.com@127.0.0.1:{port}/",
        "https://api.example.com:1@169.254.169.254/",
        "https://api.example.comx/",
    ],
)
def test_issue_bypass_is_422_naming_the_field(app_client, make_key, url: str) -> None:
    with (
        internal_server() as (port, hits),
        app_client(endpoint_allowlist=["https://api.example.com"]) as client,
    ):
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        response = client.post("/v1/audits", json=endpoint_audit(url.format(port=port)))
        assert response.status_code == 422, response.text
        detail = response.json()["error"]["details"][0]
        assert detail["path"] == "$.mechanism.endpoint.url"
        assert client.get("/v1/audits").json()["audits"] == []
    assert hits == []


def _run(app_client, make_key, allow: list[str], url: str) -> dict:
    with app_client(endpoint_allowlist=allow) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        response = client.post("/v1/audits", json=endpoint_audit(url))
        assert response.status_code == 202, response.text
        return wait_for(client.get, response.json()["id"], timeout=60)


def test_listed_name_resolving_to_loopback_is_refused_at_call_time(app_client, make_key) -> None:
    with internal_server() as (port, hits):
        url = f"http://localhost:{port}/secret"
        done = _run(app_client, make_key, [f"http://localhost:{port}/"], url)
    assert done["state"] == "FAILED" and done["error"]["code"] == "AUDIT_ERROR"
    assert "loopback" in done["error"]["message"] and SECRET not in json.dumps(done)
    assert hits == []


def test_redirect_to_an_internal_address_is_not_followed(app_client, make_key) -> None:
    with internal_server() as (port, hits):
        done = _run(
            app_client, make_key, [f"http://127.0.0.1:{port}/redirect"], f"http://127.0.0.1:{port}/redirect"
        )
    assert done["state"] == "FAILED" and "redirect" in done["error"]["message"]
    assert hits == ["/redirect"] and SECRET not in json.dumps(done)


def test_internal_reply_never_reaches_the_tenant(app_client, make_key) -> None:
    """Even for an address the operator listed, an error reply's body stays out of the audit's error."""
    with internal_server() as (port, hits):
        done = _run(app_client, make_key, [f"http://127.0.0.1:{port}/"], f"http://127.0.0.1:{port}/error")
    assert done["state"] == "FAILED" and "HTTP 500" in done["error"]["message"]
    assert hits == ["/error"] and SECRET not in json.dumps(done)
