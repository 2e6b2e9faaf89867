"""A first run without surprises: a built-in dataset the server cannot load is a 422 at submit naming
ICLAUDIT_DATA_DIR (nothing stored), GET /v1/datasets says which built-ins are available, a model loaded
for the first time shows the stage `loading model`, and a missing dataset at run time is AUDIT_ERROR."""

from __future__ import annotations

import time
from typing import Any

import pytest

from app.audit.kinds.registry import kind_module
from app.datasets.builtin import BUILTIN_NAMES, SYNTHETIC_NAME, availability
from app.jobs import providers
from app.jobs.providers import RegistryEngines
from testkit.servers import redis_server  # noqa: F401 - fixture


def _mia(dataset: str) -> dict[str, Any]:
    return {**kind_module("mia").EXAMPLE, "dataset": dataset, "trials": 1000}


def test_unavailable_builtin_is_a_422_naming_the_data_dir(app_client, make_key) -> None:
    with app_client(data_dir=None) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        response = client.post("/v1/audits", json=_mia("ag_news"))
        assert response.status_code == 422, response.text
        error = response.json()["error"]
        assert error["details"][0]["path"] == "$.dataset"
        assert "ICLAUDIT_DATA_DIR" in error["message"] and "ag_news/train.jsonl" in error["message"]
        assert client.get("/v1/audits").json()["audits"] == []  # nothing stored

        listed = {b["name"]: b for b in client.get("/v1/datasets").json()["builtins"]}
        assert set(listed) == {SYNTHETIC_NAME, *BUILTIN_NAMES}
        assert listed[SYNTHETIC_NAME] == {
            "name": SYNTHETIC_NAME,
            "available": True,
            "source": "synthetic",
            "reason": "",
        }
        assert listed["ag_news"]["available"] is False and "HF_HUB_OFFLINE" in listed["ag_news"]["reason"]

        assert client.post("/v1/audits", json=_mia(SYNTHETIC_NAME)).status_code == 202


def test_builtins_in_the_data_dir_are_listed_available(client, data_dir) -> None:
    listed = {b["name"]: b for b in client.get("/v1/datasets").json()["builtins"]}
    assert all(listed[name]["available"] and listed[name]["source"] == "data_dir" for name in BUILTIN_NAMES)
    assert availability("no_such_set", data_dir) == (None, "not a built-in name")


def test_first_load_of_a_model_shows_the_loading_stage() -> None:
    seen: list[tuple[str, float, str]] = []
    providers._llms.pop("oracle", None)  # a fresh process: the model is not loaded yet
    engines = RegistryEngines(
        progress=lambda stage, fraction, message="": seen.append((stage, fraction, message))
    )
    engines.llm("oracle")
    engines.llm("oracle")  # loaded once: no second stage
    assert seen == [("loading model", 0.0, "oracle (first use in this process)")]


def test_missing_offline_copy_at_run_time_is_an_audit_error_not_internal(tmp_path) -> None:
    from app.audit.runtime import AuditError

    datasets = providers.TenantDatasets(session_factory=None, tenant_id="t", data_dir=tmp_path, max_rows=10)  # type: ignore[arg-type]
    with pytest.raises(AuditError) as err:
        datasets.load("trec")
    message = str(err.value)
    assert "ICLAUDIT_DATA_DIR" in message and "Error" not in message


def test_a_mia_request_must_name_its_mechanism(client) -> None:
    """No silent default: without `mechanism`, or with one that has no `name`, a mia request is a 422 at
    that field listing every mechanism, and nothing is stored."""
    from app.audit.mechanisms.registry import MECHANISMS

    body = {**_mia(SYNTHETIC_NAME)}
    for given, path in (
        ({k: v for k, v in body.items() if k != "mechanism"}, "$.mechanism"),
        ({**body, "mechanism": None}, "$.mechanism"),
        ({**body, "mechanism": {"partitions": 4}}, "$.mechanism.name"),
    ):
        response = client.post("/v1/audits", json=given)
        assert response.status_code == 422, response.text
        detail = response.json()["error"]["details"][0]
        assert detail["path"] == path and "required" in detail["message"], detail
        assert all(name in detail["message"] for name in MECHANISMS), detail
    assert client.get("/v1/audits").json()["audits"] == []
    assert client.post("/v1/audits", json=body).status_code == 202


def test_every_example_and_docs_example_is_accepted_by_a_fresh_server(
    app_client,
    make_key,
    redis_server,  # noqa: F811 - the fixture
) -> None:
    """Each examples/*.json and each request example of /docs is accepted (202) by a server with no
    ICLAUDIT_DATA_DIR and the default limits: validation only, so the audits are handed to a queue
    that no worker reads (Celery on a real Redis) and none runs. The one setting given is the operator's
    allow-list entry that mia-http-endpoint.json's endpoint needs (an endpoint audit always does)."""
    import json
    from pathlib import Path

    from app.config import Settings
    from app.schemas.audits import request_examples

    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.json"))
    bodies = {p.name: json.loads(p.read_text()) for p in examples}
    bodies |= {f"/docs {kind}": example["value"] for kind, example in request_examples().items()}
    assert len(examples) >= 40
    defaults = {
        name: Settings.model_fields[name].default
        for name in ("max_trials", "max_llm_calls", "max_active_audits")
    }
    endpoint = bodies["mia-http-endpoint.json"]["mechanism"]["endpoint"]["url"]
    fresh = {
        "data_dir": None,
        "executor": "celery",
        "broker_url": redis_server.url,
        "endpoint_allowlist": [endpoint],
        **defaults,
    }
    with app_client(**fresh) as client:
        client.headers["Authorization"] = f"Bearer {make_key('newcomer')}"
        refused = {}
        for name, body in bodies.items():
            route = "/v1/sweeps" if "base" in body else "/v1/audits"
            response = client.post(route, json=body)
            while response.status_code == 429:  # the default write rate limit: wait as a client would
                time.sleep(float(response.headers["Retry-After"]))
                response = client.post(route, json=body)
            if response.status_code != 202:
                refused[name] = response.json()["error"]
        assert refused == {}
        assert all(a["state"] == "PENDING" for a in client.get("/v1/audits").json()["audits"])
