"""Issue 20 L1: the rules the OpenAPI schema states hold as the server enforces them (nothing the schema
allows is refused without a named reason, nothing it forbids accepted), and a refusal no schema can state
carries its reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema_rs
import pytest
from croniter import croniter
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from app.audit.icl.templates import custom_template
from app.audit.kinds.iclinf import EXAMPLE_FORMAT_PATTERN, TEMPLATE_PATTERN
from app.audit.kinds.iclinf import Request as IclinfRequest
from app.config import Settings
from app.main import create_app
from app.schemas.audits import request_adapter
from app.schemas.errors import REFUSALS
from app.schemas.schedules import CRON_PATTERN, ScheduleCreate
from testkit.tenants import create_key

BOUND = {"kind": "bound", "counts": {"tp": 3, "fn": 1, "fp": 1, "tn": 3}}
ONE_SCORE = {"kind": "bound", "scores_in": [0.9], "scores_out": [0.1], "threshold_strategy": "in_sample"}
MIA_SVT_OVER_CLAIM = {  # the SVT alone spends more than ε = 1: no temperature reaches the claim
    "kind": "mia",
    "dataset": "synthetic_records",
    "model": "oracle",
    "estimator": "direct",
    "epsilon": 1,
    "mechanism": {
        "name": "synthetic_generation",
        "partitions": 4,
        "shots_per_partition": 1,
        "svt": {"noise": 0.2},
    },
    "attack": {"name": "canary_prompt", "variant": "secret", "score": "exact", "threat_model": "black_box"},
}
SYNTHETIC = {
    "kind": "synthetic_generation",
    "model": "oracle",
    "temperature": None,
    "clip": 1,
    "batch_size": 2,
}


@settings(max_examples=300, deadline=None, database=None, derandomize=True)
@given(st.from_regex(CRON_PATTERN, fullmatch=True).filter(lambda cron: len(cron) <= 200))
def test_cron_pattern_no_looser_than_croniter(cron: str) -> None:
    """Every cron the schema allows (its pattern, at most 200 characters), croniter parses, and the request
    model takes."""
    assert croniter.is_valid(cron), cron
    assert ScheduleCreate.model_validate({"request": BOUND, "cron": cron}).cron == cron


@pytest.mark.parametrize("cron", ["@daily", "@hourly", "0 9 * * mon-fri", "30 6 1 JAN,Jul *", "0 0 * * 0-7"])
def test_cron_aliases_and_names_are_taken(cron: str) -> None:
    """What people write in crontabs: @daily-style aliases and month and day names, in either case."""
    assert ScheduleCreate.model_validate({"request": BOUND, "cron": cron}).cron == cron


@pytest.mark.parametrize(
    "cron",
    ["", "every night", "0 3 * * *\n", "*/0 * * * *", "0 24 * * *", "@reboot", "0 0 L * *", "0 0 * * mo"],
)
def test_cron_outside_pattern_refused(cron: str) -> None:
    with pytest.raises(ValidationError, match="is not a cron expression"):
        ScheduleCreate.model_validate({"request": BOUND, "cron": cron})


@settings(max_examples=200, deadline=None, database=None, derandomize=True)
@given(st.from_regex(TEMPLATE_PATTERN, fullmatch=True), st.from_regex(EXAMPLE_FORMAT_PATTERN, fullmatch=True))
def test_template_patterns_no_looser_than_custom_template(template: str, example_format: str) -> None:
    """Every custom template and example_format the schema's patterns allow, custom_template builds and the
    iclinf request takes."""
    custom_template(template, example_format)
    request = {"dataset": "d", "model": "m", "template": template, "example_format": example_format}
    assert IclinfRequest.model_validate(request).template == template


@pytest.mark.parametrize(
    ("template", "example_format", "field"),
    [
        ("{examples} {query} {query!s}", None, "template"),  # custom_template took these: no longer
        ("{examples} {query} {query:5}", None, "template"),
        ("{examples} {query}", "{{text}} {label}", "example_format"),
        ("{examples} {query}", "{text!r} {label} {text}", "example_format"),
    ],
)
def test_templates_outside_the_patterns_refused(
    template: str, example_format: str | None, field: str
) -> None:
    with pytest.raises(ValidationError, match=f"{field}: use "):
        IclinfRequest.model_validate(
            {"dataset": "d", "model": "m", "template": template, "example_format": example_format}
        )


@pytest.fixture
def client(tmp_path: Any, data_dir: Any) -> Any:
    settings = Settings(
        state_dir=tmp_path,
        data_dir=data_dir,
        auth_enabled=True,
        executor="celery",
        broker_url="redis://127.0.0.1:9/0",
        rate_limit="",
        write_rate_limit="",
        max_trials=1000,
        preload_models=False,
        sweep_seconds=3600,
        sweep_max_audits=4,
    )
    key = create_key(settings.sqlalchemy_url, "rules", migrate=True)
    with TestClient(create_app(settings)) as c:
        c.headers["Authorization"] = f"Bearer {key}"
        yield c


def test_refusals_are_named_and_declared(client: TestClient) -> None:
    """A schema-valid request refused for server state or arithmetic names its reason, and the operation
    declares that reason in the OpenAPI (x-refusals and the 422's reason enum); a schema rule has none."""
    iclinf = {"kind": "iclinf", "dataset": "no-such-dataset", "model": "oracle"}
    cases = [
        ("/v1/audits", iclinf, "UNKNOWN_DATASET", "$.dataset"),
        ("/v1/audits", {**BOUND, "model": "no-such-model"}, "UNKNOWN_MODEL", "$.model"),
        ("/v1/audits", {**BOUND, "notify": "http://127.0.0.1:9/x"}, "EGRESS_REFUSED", "$.notify"),
        (
            "/v1/sweeps",
            {"base": BOUND, "grid": {"confidence": [0.5, 0.6, 0.7, 0.8, 0.9]}},
            "SERVER_LIMIT",
            "$.grid",
        ),
        ("/v1/schedules", {"request": BOUND, "cron": "0 0 31 2 *"}, "CRON_NEVER_FIRES", "$.cron"),
        ("/v1/webhooks", {"url": "http://127.1/hook"}, "EGRESS_REFUSED", "$.url"),
        ("/v1/audits", {**SYNTHETIC, "target_epsilon": 1e-6}, "NO_SOLUTION", "$.target_epsilon"),
        ("/v1/audits", MIA_SVT_OVER_CLAIM, "NO_SOLUTION", "$.epsilon"),
        (
            "/v1/sweeps",
            {"base": ONE_SCORE, "grid": {"threshold_strategy": ["split"]}},
            "GRID_POINT_RULE",
            '$.grid["threshold_strategy"]',
        ),
    ]
    document = client.get("/openapi.json").json()
    for path, body, reason, where in cases:
        answer = client.post(path, json=body)
        assert answer.status_code == 422, (path, answer.text)
        error = answer.json()["error"]
        assert (error["reason"], error["details"][0]["path"]) == (reason, where), error
        operation = document["paths"][path]["post"]
        assert reason in operation["x-refusals"] and REFUSALS[reason] == operation["x-refusals"][reason]
        narrowed = operation["responses"]["422"]["content"]["application/json"]["schema"]["allOf"][1]
        assert reason in narrowed["properties"]["error"]["properties"]["reason"]["enum"]
    plain = client.post("/v1/audits", json={**BOUND, "confidence": 2})
    assert plain.status_code == 422 and "reason" not in plain.json()["error"]


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_example_requests_meet_the_schema() -> None:
    """The schema is no stricter than the server on real requests: every example audit request in
    examples/ (each kind, mia's mechanisms and attacks) meets POST /v1/audits's body schema."""
    document = create_app(Settings(auth_enabled=False)).openapi()
    body = document["paths"]["/v1/audits"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    validator = jsonschema_rs.Draft202012Validator({**body, "components": document["components"]})
    requests = []
    for path in sorted(EXAMPLES.glob("*.json")):
        data = json.loads(path.read_text())
        requests += [(path.name, item) for item in (data if isinstance(data, list) else [data])]
    requests = [(name, item) for name, item in requests if isinstance(item, dict) and "kind" in item]
    assert len(requests) >= 50 and {item["kind"] for _, item in requests} >= {"bound", "mia", "iclinf"}
    for name, item in requests:
        request_adapter().validate_python(item)  # the server takes it
        assert validator.is_valid(item), (name, [e.message[:200] for e in validator.iter_errors(item)][:3])
