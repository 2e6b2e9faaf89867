"""GET /v1/audits/{id}/result.png and `iclaudit result ID --format png --output FILE`: the plot of a
SUCCEEDED audit (the same bytes app.reports.plots renders), 404 before and for another tenant."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import _register, app
from app.main import create_app
from app.reports.plots import render
from testkit.client import bound_request, wait_for
from testkit.held_endpoint import HeldEndpoint
from testkit.servers import serve_in_thread

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_result_png_of_a_succeeded_audit(client) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    done = wait_for(client.get, audit["id"])
    assert done["state"] == "SUCCEEDED", done["error"]
    response = client.get(f"/v1/audits/{audit['id']}/result.png")
    assert response.status_code == 200 and response.headers["content-type"] == "image/png"
    assert response.content.startswith(PNG_SIGNATURE) and len(response.content) > 20_000
    assert response.content == render("bound", done["request"], done["result"])


def test_result_png_is_404_until_succeeded(app_client, make_key) -> None:
    """Held by testkit/held_endpoint.py, not a trial count: the first audit is RUNNING and the
    second PENDING for as long as the checks take, on any machine (issue 23)."""
    with HeldEndpoint() as gate, app_client(endpoint_allowlist=[gate.url]) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        running = client.post("/v1/audits", json=gate.request()).json()
        gate.wait_held()
        queued = client.post("/v1/audits", json=bound_request()).json()
        for audit, state in ((running, "RUNNING"), (queued, "PENDING")):
            assert client.get(f"/v1/audits/{audit['id']}").json()["state"] == state
            response = client.get(f"/v1/audits/{audit['id']}/result.png")
            assert response.status_code == 404
            message = response.json()["error"]["message"]
            assert state in message and "a result exists once it has SUCCEEDED" in message
            assert client.get(f"/v1/audits/{audit['id']}/result").json()["error"]["message"] == message
        client.post(f"/v1/audits/{queued['id']}/cancel")
        client.post(f"/v1/audits/{running['id']}/cancel")
        gate.release()
        assert wait_for(client.get, running["id"])["state"] == "CANCELLED"


def test_result_png_is_tenant_scoped(client, make_key) -> None:
    audit = client.post("/v1/audits", json=bound_request()).json()
    wait_for(client.get, audit["id"], ("SUCCEEDED",))
    other = {"Authorization": f"Bearer {make_key('bob')}"}
    response = client.get(f"/v1/audits/{audit['id']}/result.png", headers=other)
    assert response.status_code == 404 and "No audit" in response.json()["error"]["message"]
    assert client.get(f"/v1/audits/{'0' * 32}/result.png").status_code == 404


@pytest.fixture
def live_server(settings) -> Iterator[str]:
    """The app served by uvicorn on a loopback port in a thread, for the CLI's real HTTP client."""
    with serve_in_thread(create_app(settings), "the service") as url:
        yield url


def test_cli_result_format_png_writes_the_plot(live_server: str, make_key, tmp_path: Path) -> None:
    import httpx

    key = make_key("carol")
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=live_server, headers=headers) as api:
        audit = api.post("/v1/audits", json=bound_request()).json()
        done = wait_for(api.get, audit["id"])
    _register()
    cli = CliRunner()
    out = tmp_path / "bound.png"
    args = ["result", audit["id"], "--url", live_server, "--api-key", key]
    written = cli.invoke(app, [*args, "--format", "png", "--output", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_bytes() == render("bound", done["request"], done["result"])

    no_output = cli.invoke(app, [*args, "--format", "png"])
    assert no_output.exit_code == 3 and "--output" in no_output.output  # usage error (the gate's code)
    missing = cli.invoke(app, [*args[:1], "0" * 32, *args[2:], "--format", "png", "--output", str(out)])
    assert missing.exit_code == 3 and "404" in missing.output
