"""The OpenAPI document is one a client generator can use: unique readable operation ids, the bearer
security scheme on every /v1 operation, typed results (a discriminated union on `kind`) whose fields are
described, readable schema names, and an example result per kind."""

from __future__ import annotations

import re

import pytest

from app.audit.kinds.registry import KINDS
from app.main import create_app


@pytest.fixture(scope="module")
def spec() -> dict:
    return create_app().openapi()


def test_operation_ids_are_unique_and_readable(spec: dict) -> None:
    ids = [op["operationId"] for ops in spec["paths"].values() for op in ops.values() if isinstance(op, dict)]
    assert len(ids) == len(set(ids))
    assert all(re.fullmatch(r"[a-z][a-zA-Z0-9]+", i) for i in ids), ids
    assert {"submitAudit", "getAudit", "listAudits", "cancelAudit", "getAuditResult"} <= set(ids)


def test_bearer_scheme_guards_every_v1_operation(spec: dict) -> None:
    assert spec["components"]["securitySchemes"]["bearerAuth"] == {
        **spec["components"]["securitySchemes"]["bearerAuth"],
        "type": "http",
        "scheme": "bearer",
    }
    for path, ops in spec["paths"].items():
        for op in ops.values():
            if isinstance(op, dict) and path.startswith("/v1/"):
                assert op["security"] == [{"bearerAuth": []}], path


def test_the_audit_result_is_a_described_union_with_readable_names(spec: dict) -> None:
    schemas = spec["components"]["schemas"]
    assert not [name for name in schemas if "__" in name]  # no module-path names
    result = spec["components"]["schemas"]["AuditResource"]["properties"]["result"]
    union = next(s for s in result["anyOf"] if "oneOf" in s)
    assert union["discriminator"]["propertyName"] == "kind"
    assert set(union["discriminator"]["mapping"]) == set(KINDS)
    for ref in union["discriminator"]["mapping"].values():
        model = schemas[ref.rsplit("/", 1)[1]]
        assert all(prop.get("description") for name, prop in model["properties"].items() if name != "kind")
    examples = spec["paths"]["/v1/audits/{audit_id}/result"]["get"]["responses"]["200"]["content"]
    shown = examples["application/json"]["examples"]
    assert set(shown) == set(KINDS)
    assert all(example["value"]["kind"] == kind for kind, example in shown.items())


VERDICT_ENUM = ["violation", "leak", "inconclusive", "consistent"]


def _enum(prop: dict) -> list[str]:
    """The string enum of an optional (`anyOf` [enum, null]) or required property."""
    return next((s["enum"] for s in prop.get("anyOf", [prop]) if "enum" in s), [])


def test_the_verdict_is_in_every_typed_result_and_digest(spec: dict) -> None:
    """The verdict fields (issue 18 §1) are in the schema of every result that measures leakage, of the
    summary's digest, of sweep rows and points, of schedule runs, and of the list's `verdict` filter; the
    webhook events include audit.leak."""
    schemas = spec["components"]["schemas"]
    fields = {"verdict", "verdict_reason", "headline", "epsilon_detectable", "epsilon_detectable_unbounded"}
    for name in ("MiaAuditResult", "BoundAuditResult", "SyntheticGenerationAuditResult"):
        props = schemas[name]["properties"]
        assert fields <= set(props), name
        assert _enum(props["verdict"]) == VERDICT_ENUM and all(props[f]["description"] for f in fields)
    for name in ("MiaAuditResult", "BoundAuditResult"):  # judged against max_epsilon when nothing is claimed
        assert "max_epsilon" in schemas[name]["properties"]

    digest = schemas["Verdict"]["properties"]
    assert {"outcome", "headline", "epsilon_lower", "epsilon_detectable", "violation"} <= set(digest)
    assert _enum(digest["outcome"]) == VERDICT_ENUM
    assert schemas["AuditSummary"]["properties"]["verdict"]["anyOf"][0]["$ref"].endswith("/Verdict")

    listing = {p["name"]: p for p in spec["paths"]["/v1/audits"]["get"]["parameters"]}
    assert _enum(listing["verdict"]["schema"]) == VERDICT_ENUM and listing["verdict"]["in"] == "query"

    for name in ("SweepRow", "ScheduleRunResource"):
        props = schemas[name]["properties"]
        assert {"violation", "outcome", "headline"} <= set(props) and _enum(props["outcome"]) == VERDICT_ENUM
    assert {"outcome", "outcomes", "headline", "violations"} <= set(schemas["SweepPoint"]["properties"])
    assert "epsilon_detectable" in schemas["SweepRow"]["properties"]

    events = schemas["WebhookCreate"]["properties"]["events"]
    assert {"audit.violation", "audit.leak", "audit.succeeded"} <= set(events["items"]["enum"])
    assert "audit.leak" in events["description"]
