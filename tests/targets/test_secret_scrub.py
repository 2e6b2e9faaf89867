"""Secret values never leave the call, and operator secrets are granted, not shared.

Real app (inline worker process), real HTTP target and webhook receiver, SQLite file and the session's
PostgreSQL. Secrets that no HTTP library sends (a trailing newline, space or tab, CR/LF, non-ASCII) are a
422 at submit, or an AUDIT_ERROR naming the header when they turn bad after it; a valid secret that a target
echoes back (into a multi-step URL that then fails, or as its answer) is masked in the audit's error, the
stored replies, the webhook body and the log lines. Each value carries a unique token: the token is absent
from every API answer, webhook body, log line and the whole database.
"""

from __future__ import annotations

import io
import json
import logging
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse

from app import observability
from app.secrets import MASK
from testkit.client import endpoint_request, wait_for
from testkit.servers import DIALECTS, fresh_database, serve_in_thread

TOKEN = uuid.uuid4().hex
BAD = {  # operator (environment) secrets no header can carry
    "OP_NL": f"op-nl-{TOKEN}\n",
    "OP_SPACE": f"op-sp-{TOKEN} ",
    "OP_TAB": f"op-tab-{TOKEN}\t",
    "OP_CRLF": f"op-crlf-{TOKEN}\r\nX-Injected: 1",
    "OP_UNICODE": f"op-ünï-{TOKEN}",
}
ECHO = f"echo-{TOKEN}"  # valid; the target sends it back
FILE_OK, FILE_BAD = f"file-{TOKEN}", f"file-{TOKEN}\n"


@pytest.fixture(params=DIALECTS)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return fresh_database(request.param, tmp_path)


class Site:
    """The deployed target and the webhook receiver, on one uvicorn server."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.hooks: list[bytes] = []

    def app(self) -> FastAPI:
        api = FastAPI()
        answer = {"choices": [{"text": "1"}]}

        @api.post("/ask")
        async def ask() -> dict[str, Any]:
            return answer

        @api.post("/slow")
        async def slow() -> dict[str, Any]:  # holds the one worker until the test lets it go
            await anyio.to_thread.run_sync(self.gate.wait, 120)
            return answer

        @api.post("/session")
        async def session(request: Request) -> dict[str, Any]:
            return {"id": request.headers.get("x-session-key")}  # a target that echoes the credential

        @api.post("/s/{sid}/ask")
        async def broken(sid: str) -> JSONResponse:
            return JSONResponse({"error": "down"}, status_code=500)

        @api.post("/echo")
        async def echo(request: Request) -> dict[str, Any]:
            return {"choices": [{"text": request.headers.get("x-session-key")}]}

        @api.post("/hook")
        async def hook(request: Request) -> Response:
            self.hooks.append(await request.body())
            return Response(status_code=204)

        return api


def database_text(url: str, tmp_path: Path) -> str:
    """Everything the database holds: the SQLite files' bytes, or every PostgreSQL row as text."""
    if url.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in tmp_path.glob("iclaudit.db*")).decode("latin-1")
    import psycopg

    with psycopg.connect(url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        tables = [
            row[0]
            for row in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'"
            )
        ]
        rows = [str(r[0]) for t in tables for r in conn.execute(f'SELECT CAST(t AS text) FROM "{t}" t')]
    assert any("ag_news" in r for r in rows)  # the audits are there
    return "\n".join(rows)


def test_secret_values_never_leave_the_call(
    app_client, make_key, database_url: str, tmp_path: Path, monkeypatch, caplog
) -> None:
    caplog.set_level(logging.DEBUG)
    lines = io.StringIO()
    handler = observability.log_handler(lines, "json")
    logging.getLogger().addHandler(handler)
    for name, value in {**BAD, "ECHO_KEY": ECHO}.items():
        monkeypatch.setenv(f"ICLAUDIT_SECRET_{name}", value)
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir()
    tenant_file = secrets_dir / "alice.json"
    tenant_file.write_text(json.dumps({"FILE_KEY": FILE_OK}))
    site = Site()
    answers: list[str] = []
    grants = {name: ["alice"] for name in [*BAD, "ECHO_KEY"]}
    try:
        with (
            serve_in_thread(site.app()) as url,
            app_client(
                endpoint_allowlist=[url + "/"],
                webhook_allowlist=[url + "/"],
                webhook_tick_seconds=0.2,
                secrets_dir=secrets_dir,
                secrets_grants=grants,
            ) as client,
        ):
            client.headers["Authorization"] = f"Bearer {make_key('alice')}"

            # 1. a value no header can carry: 422 at submit naming the header and the secret, never the value
            for name in BAD:
                for body, where in (
                    (
                        endpoint_request(url + "/ask", headers={"Authorization": {"secret": name}}),
                        "mechanism.endpoint.headers",
                    ),
                    (
                        {
                            "kind": "mia",
                            "dataset": "synthetic_records",
                            "target": {
                                "url": url + "/v1",
                                "model": "m",
                                "headers": {"X-Api-Key": {"secret": name}},
                            },
                            "mechanism": {"name": "none", "shots_per_partition": 2},
                            "attack": {"name": "likelihood", "threat_model": "white_box", "secret": "label"},
                        },
                        "target.headers",
                    ),
                ):
                    refused = client.post("/v1/audits", json=body)
                    answers.append(refused.text)
                    assert refused.status_code == 422, refused.text
                    error = refused.json()["error"]
                    header = "Authorization" if where.startswith("mechanism") else "X-Api-Key"
                    assert error["reason"] == "SECRET_INVALID"
                    assert error["details"][0]["path"] == f"$.{where}.{header}.secret"
                    assert name in error["details"][0]["message"]

            # 2. a secret that turns bad after submit: AUDIT_ERROR naming the header
            holder = client.post("/v1/audits", json=endpoint_request(url + "/slow", headers={}))
            assert holder.status_code == 202, holder.text
            deadline = time.monotonic() + 240  # the worker process starts first (slow on a loaded machine)
            while client.get(f"/v1/audits/{holder.json()['id']}").json()["state"] != "RUNNING":
                assert time.monotonic() < deadline, "the holding audit never ran"
                time.sleep(0.1)
            later = client.post(
                "/v1/audits",
                json=endpoint_request(url + "/ask", headers={"Authorization": {"secret": "FILE_KEY"}})
                | {"notify": url + "/hook"},
            )
            assert later.status_code == 202, later.text
            tenant_file.write_text(json.dumps({"FILE_KEY": FILE_BAD}))
            site.gate.set()

            # 3. a valid secret the target echoes into a multi-step URL that then fails
            step = {"url": url + "/session", "body": {}, "save": {"session": "$.id"}}
            echoed = client.post(
                "/v1/audits",
                json=endpoint_request(
                    url + "/s/{session}/ask", headers={"X-Session-Key": {"secret": "ECHO_KEY"}}, steps=[step]
                )
                | {"notify": url + "/hook"},
            )
            assert echoed.status_code == 202, echoed.text
            # 4. ... and as its answer, which is stored for resume
            stored = client.post(
                "/v1/audits",
                json=endpoint_request(url + "/echo", headers={"X-Session-Key": {"secret": "ECHO_KEY"}}),
            )
            assert stored.status_code == 202, stored.text

            done = {
                key: wait_for(client.get, r.json()["id"], timeout=180)
                for key, r in (("later", later), ("echoed", echoed), ("stored", stored), ("holder", holder))
            }
            assert done["later"]["state"] == "FAILED"
            assert done["later"]["error"]["code"] == "AUDIT_ERROR"
            message = done["later"]["error"]["message"]
            assert "mechanism.endpoint.headers.Authorization" in message and "FILE_KEY" in message
            assert "not a valid header value" in message
            assert done["echoed"]["state"] == "FAILED" and done["echoed"]["error"]["code"] == "AUDIT_ERROR"
            assert f"/s/{MASK}/ask" in done["echoed"]["error"]["message"]  # the URL, the value masked
            assert done["stored"]["state"] == "SUCCEEDED", done["stored"]["error"]
            assert done["stored"]["result"]["endpoint_calls"] > 0
            deadline = time.monotonic() + 60
            while len(site.hooks) < 2:
                assert time.monotonic() < deadline, f"{len(site.hooks)} webhooks"
                time.sleep(0.1)
            for audit in done.values():
                for path in (f"/v1/audits/{audit['id']}", f"/v1/audits/{audit['id']}/events"):
                    answers.append(client.get(path).text)
            answers += [client.get("/v1/audits").text, client.get("/v1/audits?view=full").text]
    finally:
        site.gate.set()
        logging.getLogger().removeHandler(handler)
    hooks = [body.decode() for body in site.hooks]
    failed = [json.loads(h) for h in hooks if json.loads(h)["type"] == "audit.failed"]
    assert {h["data"]["id"] for h in failed} >= {done["later"]["id"], done["echoed"]["id"]}
    logs = caplog.text + lines.getvalue()
    assert "HTTP Request: POST" in logs and MASK in logs  # the endpoint calls were logged, masked
    everything = {
        "API answers": "\n".join(answers),
        "webhook bodies": "\n".join(hooks),
        "log lines": logs,
        "database": database_text(database_url, tmp_path),
    }
    assert MASK in everything["database"]  # the echoed answers were stored, masked
    for where, text in everything.items():
        assert TOKEN not in text, f"a secret value reached the {where}"
