"""Tenant input is refused at submit or ends the audit as its own error, never as INTERNAL: headers the HTTP
client owns (hop-by-hop, framing, Host), credential-looking header names with a literal value, a literal
value no header can carry, a line break that a multi-step step saved into a URL. The operator's default
budget can only be lowered. The shareable report is a sandboxed document without script."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from app.api.headers import REPORT_CSP
from testkit.client import bound_request, endpoint_request, wait_for
from testkit.servers import serve_in_thread

CLOSED = "http://127.0.0.1:9/"


def chat(headers: dict) -> dict:
    return {
        "kind": "mia",
        "dataset": "synthetic_records",
        "target": {"url": CLOSED + "v1", "model": "m", "headers": headers},
        "mechanism": {"name": "none", "shots_per_partition": 2},
        "attack": {"name": "likelihood", "threat_model": "white_box", "secret": "label"},
    }


def test_headers_the_client_owns_and_literal_credentials_are_422_naming_the_header(
    app_client, make_key
) -> None:
    owned = [
        "Transfer-Encoding",
        "Content-Length",
        "Connection",
        "Upgrade",
        "TE",
        "Keep-Alive",
        "Proxy-Connection",
        "Proxy-Authorization",
        "Host",
        "Trailer",
    ]
    credentials = ["X-Key", "Ocp-Apim-Subscription-Key", "X-Signature", "X-Client-Secret", "X-Auth-Token"]
    cases = [
        *((name, "1", "mechanism", "may not be set") for name in owned),
        *((name, "literal-value", "mechanism", "by reference") for name in credentials),
        ("X-Trace", "a\r\nX-Injected: 1", "mechanism", "not a valid header value"),
        ("X-Trace", "trailing ", "mechanism", "not a valid header value"),
        ("X-Trace", "naïve", "mechanism", "not a valid header value"),
        ("Bad Name", "1", "mechanism", "not a valid header name"),
        ("Transfer-Encoding", "chunked", "target", "may not be set"),
        ("Ocp-Apim-Subscription-Key", "literal-value", "target", "by reference"),
    ]
    with app_client(endpoint_allowlist=[CLOSED]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        for name, value, where, words in cases:
            body = (
                endpoint_request(CLOSED, headers={name: value})
                if where == "mechanism"
                else chat({name: value})
            )
            answer = client.post("/v1/audits", json=body)
            assert answer.status_code == 422, (name, answer.text)
            detail = answer.json()["error"]["details"][0]
            prefix = "$.mechanism.endpoint.headers" if where == "mechanism" else "$.target.headers"
            assert detail["path"] == f"{prefix}.{name}", (name, detail)
            assert words in detail["message"] and name in detail["message"], (name, detail)
        assert client.get("/v1/audits").json()["audits"] == []  # nothing stored


def test_a_line_break_saved_by_a_step_is_the_audits_error_not_internal(app_client, make_key) -> None:
    target = FastAPI()

    @target.post("/session")
    async def session() -> dict[str, Any]:
        return {"id": "abc\r\nX-Injected: 1"}

    @target.post("/s/{sid}/ask")
    async def ask(sid: str) -> JSONResponse:
        return JSONResponse({"choices": [{"text": "1"}]})

    with serve_in_thread(target) as url, app_client(endpoint_allowlist=[url + "/"]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        step = {"url": url + "/session", "body": {}, "save": {"session": "$.id"}}
        submitted = client.post("/v1/audits", json=endpoint_request(url + "/s/{session}/ask", steps=[step]))
        assert submitted.status_code == 202, submitted.text
        done = wait_for(client.get, submitted.json()["id"], timeout=120)
    assert done["state"] == "FAILED"
    assert done["error"]["code"] == "AUDIT_ERROR", done["error"]
    assert "not valid HTTP" in done["error"]["message"]


def test_the_default_budget_can_only_be_lowered(app_client, make_key) -> None:
    default = {"max_calls": 100, "max_seconds": 3600}
    with app_client(default_budget=default, endpoint_allowlist=[CLOSED]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"

        def stored(budget: Any) -> dict:
            body = endpoint_request(CLOSED) | ({} if budget == "absent" else {"budget": budget})
            answer = client.post("/v1/audits", json=body)
            assert answer.status_code == 202, answer.text
            return answer.json()

        expected = default | {"max_tokens": None}
        for budget in ("absent", None, {}, {"max_calls": None}, {"max_calls": 10**9, "max_seconds": 10**5}):
            assert stored(budget)["request"]["budget"] == expected, budget
        lowered = stored({"max_calls": 5, "max_tokens": 1000})
        assert lowered["request"]["budget"] == {"max_calls": 5, "max_tokens": 1000, "max_seconds": 3600}

        failed = wait_for(client.get, lowered["id"], timeout=120)
        assert failed["state"] == "FAILED"  # nothing listens on port 9
        for changes in ({"budget": None}, {"budget": {}}, {"budget": {"max_calls": 10**9}}):
            resumed = client.post(f"/v1/audits/{failed['id']}/resume", json=changes)
            assert resumed.status_code == 202, resumed.text
            assert resumed.json()["request"]["budget"] == expected, changes
        sweep = client.post(
            "/v1/sweeps", json={"base": endpoint_request(CLOSED) | {"budget": {}}, "grid": {"trials": [4, 6]}}
        )
        assert sweep.status_code == 202, sweep.text
        audits = client.get("/v1/audits?view=full&page_size=50").json()["audits"]
        assert len(audits) == 6 + 3 + 2  # submitted, resumed, the sweep's children
        assert all(a["request"]["budget"]["max_calls"] <= 100 for a in audits)


def test_report_is_sandboxed_without_script(app_client, make_key) -> None:
    with app_client() as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        submitted = client.post("/v1/audits", json=bound_request())
        done = wait_for(client.get, submitted.json()["id"], timeout=60)
        assert done["state"] == "SUCCEEDED"
        report = client.get(f"/v1/audits/{done['id']}/report.html")
    assert report.status_code == 200
    policy = report.headers["content-security-policy"]
    assert policy == REPORT_CSP and policy.split(";")[0] == "sandbox" and "script" not in policy
    assert "<script" not in report.text.lower()
