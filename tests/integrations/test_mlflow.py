"""MLflow sinks against a real `mlflow server` (SQLite backend store, --serve-artifacts) started here from
`.venv-mlflow` (scripts/setup-mlflow.sh); the runs are read back with MLflow's own client in that venv.
A run arrives after the server was down (the webhook retries), once; a sweep is a parent run with its
children nested; a target outside the allow-list is a 422 naming the field."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from integrations.test_webhooks import failing_endpoint_mia

from testkit.client import verdict_request, wait_for
from testkit.extras import built_python
from testkit.servers import free_port

ROOT = Path(__file__).resolve().parents[2]
MLFLOW_VENV = Path(os.environ.get("MLFLOW_VENV", ROOT / ".venv-mlflow"))
MLFLOW_STAMP = MLFLOW_VENV / ".iclaudit-mlflow-v1"
SQLITE_ONLY = pytest.mark.parametrize("database_url", ["sqlite"], indirect=True)
# no telemetry; no job runner (MLflow 3's huey consumers: a dozen processes this test never uses)
MLFLOW_ENV = {
    "MLFLOW_DISABLE_TELEMETRY": "true",
    "DO_NOT_TRACK": "true",
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false",
}
START_SECONDS = 300
"""mlflow imports for 80 s on the shared 2-core machine under load 16 (measured); idle it takes seconds."""

READ_RUNS = """
import json, sys, tempfile
from mlflow import MlflowClient
client = MlflowClient(sys.argv[1])
experiment = client.get_experiment_by_name(sys.argv[2])
runs = []
for run in client.search_runs([experiment.experiment_id], max_results=1000):
    artifacts = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    result = None
    if "result.json" in artifacts:
        with tempfile.TemporaryDirectory() as d:
            with open(client.download_artifacts(run.info.run_id, "result.json", d)) as f:
                result = json.load(f)
    runs.append({"id": run.info.run_id, "status": run.info.status, "params": run.data.params,
                 "metrics": run.data.metrics, "tags": run.data.tags, "artifacts": artifacts, "result": result})
print(json.dumps(runs))
"""


@pytest.fixture(scope="module")
def mlflow_python() -> Path:
    return built_python(MLFLOW_VENV, MLFLOW_STAMP, "scripts/setup-mlflow.sh")


class MlflowServer:
    """`mlflow server` on 127.0.0.1:`port` over one SQLite file and artifact folder; stop() and start()
    again keep both (an outage)."""

    def __init__(self, python: Path, root: Path) -> None:
        self.python, self.root, self.port = python, root, free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                str(self.python.parent / "mlflow"),
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'mlflow.db'}",
                "--serve-artifacts",
                "--artifacts-destination",
                str(self.root / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=open(self.root / "server.log", "ab"),  # noqa: SIM115 - closed with the process
            stderr=subprocess.STDOUT,
            env={**os.environ, **MLFLOW_ENV},
            start_new_session=True,  # its own process group: stop() ends the server's children too
        )
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError((self.root / "server.log").read_text()[-3000:])
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise AssertionError(f"mlflow server did not answer /health in {START_SECONDS} s")

    def stop(self) -> None:
        if self.proc is not None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # a child that outlived the server
            self.proc = None

    def runs(self, experiment: str) -> list[dict[str, Any]]:
        """Every run of `experiment`, read with MLflow's own client."""
        out = subprocess.run(
            [str(self.python), "-c", READ_RUNS, self.url, experiment],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, **MLFLOW_ENV},
        )
        assert out.returncode == 0, out.stderr[-3000:]
        return json.loads(out.stdout)  # type: ignore[no-any-return]


@pytest.fixture
def mlflow_server(mlflow_python: Path, tmp_path: Path) -> Iterator[MlflowServer]:
    server = MlflowServer(mlflow_python, tmp_path)
    yield server
    server.stop()


def deliveries(client: TestClient, sink_id: str) -> list[dict[str, Any]]:
    return client.get(f"/v1/mlflow-sinks/{sink_id}/deliveries").json()["deliveries"]  # type: ignore[no-any-return]


def wait_delivered(client: TestClient, sink_id: str, n: int, timeout: float = 120) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while True:
        got = deliveries(client, sink_id)
        if len(got) >= n and all(d["state"] == "SUCCEEDED" for d in got):
            return got
        failed = [d for d in got if d["state"] == "FAILED"]
        assert not failed, failed
        assert time.monotonic() < deadline, got
        time.sleep(0.2)


@SQLITE_ONLY
def test_finished_audits_become_mlflow_runs(
    app_client: Any, make_key: Any, mlflow_server: MlflowServer
) -> None:
    closed = free_port()
    with app_client(
        webhook_allowlist=[mlflow_server.url + "/"], endpoint_allowlist=[f"http://127.0.0.1:{closed}/"]
    ) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        refused = client.post(
            "/v1/mlflow-sinks", json={"tracking_uri": "http://10.1.2.3:5000", "experiment": "x"}
        )
        assert (
            refused.status_code == 422 and refused.json()["error"]["details"][0]["path"] == "$.tracking_uri"
        )
        created = client.post(
            "/v1/mlflow-sinks",
            json={"tracking_uri": mlflow_server.url, "experiment": "privacy audits", "token": "t0ken"},
        )
        assert created.status_code == 201, created.text
        sink = created.json()
        assert sink["has_token"] is True and "token" not in sink
        assert [s["id"] for s in client.get("/v1/mlflow-sinks").json()["sinks"]] == [sink["id"]]

        # the server is down while the first audit finishes: the delivery is retried until it comes up
        leak = client.post(
            "/v1/audits", json=verdict_request("leak", labels={"name": "nightly", "git_sha": "abc123"})
        ).json()
        assert wait_for(client.get, leak["id"])["state"] == "SUCCEEDED"
        deadline = time.monotonic() + 30
        while not any(d["attempts"] >= 2 for d in deliveries(client, sink["id"])):
            assert time.monotonic() < deadline, deliveries(client, sink["id"])
            time.sleep(0.1)
        (pending,) = deliveries(client, sink["id"])
        assert pending["state"] == "PENDING" and "could not be reached" in pending["last_error"]
        mlflow_server.start()

        failed = client.post("/v1/audits", json=failing_endpoint_mia(closed)).json()
        assert wait_for(client.get, failed["id"])["state"] == "FAILED"
        sweep = client.post(
            "/v1/sweeps",
            json={
                "base": verdict_request("leak"),
                "grid": {"confidence": [0.9, 0.95]},
                "labels": {"name": "grid"},
            },
        )
        assert sweep.status_code == 202, sweep.text
        sweep_id = sweep.json()["id"]
        # 1 + 1 audits, 2 sweep children, the sweep's own delivery
        wait_delivered(client, sink["id"], 5)
        time.sleep(0.5)  # more ticks: nothing is written twice
        leak = client.get(f"/v1/audits/{leak['id']}").json()
        leak["result"] = client.get(f"/v1/audits/{leak['id']}/result?records=redacted").json()
        children = [c["audit_id"] for c in client.get(f"/v1/sweeps/{sweep_id}").json()["children"]]

    runs = mlflow_server.runs("privacy audits")
    by_audit = {r["tags"].get("iclaudit.audit_id"): r for r in runs}
    assert len(runs) == 5 and set(by_audit) == {leak["id"], failed["id"], *children, None}

    run = by_audit[leak["id"]]
    result = leak["result"]
    assert run["status"] == "FINISHED" and run["result"] == result
    assert run["tags"]["iclaudit.verdict"] == result["verdict"] == "leak"
    assert run["tags"]["iclaudit.kind"] == "bound" and run["tags"]["mlflow.runName"] == "nightly"
    assert (
        run["tags"]["label.git_sha"] == "abc123" and run["tags"]["mlflow.note.content"] == result["headline"]
    )
    assert run["metrics"]["epsilon_lower"] == pytest.approx(result["epsilon_lower"])
    for name in ("tpr", "fpr", "epsilon_empirical_assumption_free", "auc", "epsilon_detectable"):
        if result.get(name) is not None:
            assert run["metrics"][name] == pytest.approx(result[name]), name
    assert {"tpr", "fpr"} <= set(run["metrics"])
    request = leak["request"]
    assert run["params"]["kind"] == "bound" and "labels.name" not in run["params"]
    scalars = {k: v for k, v in request.items() if v is not None and not isinstance(v, dict | list)}
    assert {k: run["params"][k] for k in scalars} == {
        k: v if isinstance(v, str) else json.dumps(v) for k, v in scalars.items()
    }
    assert run["artifacts"] == ["report.html", "request.json", "result.json"]

    run = by_audit[failed["id"]]
    assert run["status"] == "FAILED" and run["metrics"] == {} and run["artifacts"] == ["request.json"]
    assert "iclaudit.error" in run["tags"] and run["params"]["mechanism.name"] == "http_endpoint"

    parent = by_audit[None]
    assert parent["tags"]["iclaudit.sweep_id"] == sweep_id and parent["tags"]["mlflow.runName"] == "grid"
    assert parent["status"] == "FINISHED" and parent["params"]["grid.confidence"] == "[0.9,0.95]"
    assert parent["metrics"]["children"] == 2 and parent["metrics"]["outcomes.leak"] == 2
    for child in children:
        assert by_audit[child]["tags"]["mlflow.parentRunId"] == parent["id"]
        assert by_audit[child]["params"]["confidence"] in ("0.9", "0.95")
