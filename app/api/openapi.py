"""The OpenAPI document as client generators like it: readable operation ids (`submitAudit`, `getAudit`,
…), the bearer security scheme (so /docs has an Authorize button) on every `/v1` operation, and example
results per kind on the operations that return one.

`operation_id` is the app's `generate_unique_id_function`; `install_openapi(app)` runs once in create_app,
after every router is included.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

# route function name → operation id, where camel-casing the name would not say what it does
OPERATION_IDS: dict[str, str] = {
    "get_result": "getAuditResult",
    "get_result_png": "getAuditResultPng",
    "audit_events": "streamAuditEvents",
    "healthz": "getLiveness",
    "readyz": "getReadiness",
    "synthetic_generation": "accountSyntheticGeneration",
    "gaussian": "calibrateGaussian",
    "redeliver": "redeliverWebhook",
    "list_deliveries": "listWebhookDeliveries",
}
BEARER = "bearerAuth"


def operation_id(route: APIRoute) -> str:
    """`submit_audit` → `submitAudit` (or the OPERATION_IDS entry)."""
    name = OPERATION_IDS.get(route.name, route.name)
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _result_examples() -> dict[str, dict[str, Any]]:
    """One example result per kind (`EXAMPLE` in app/audit/results/<kind>.py: a real run's output)."""
    import importlib

    from app.audit.kinds.registry import KINDS

    examples = {}
    for kind in KINDS:
        example = getattr(importlib.import_module(f"app.audit.results.{kind}"), "EXAMPLE", None)
        if example is not None:
            examples[kind] = {"summary": f"a `{kind}` result", "value": {"kind": kind, **example}}
    return examples


def _require_discriminators(document: dict[str, Any]) -> None:
    """Mark each union's tag required in every member it maps to. A kind's model gives `kind` a default (its
    only value), so pydantic leaves it out of `required`, yet the discriminated union needs it to pick the
    member: without this a schema-valid `{}` would be refused."""
    components = document.get("components", {}).get("schemas", {})

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            tag = node.get("discriminator", {}).get("propertyName") if "discriminator" in node else None
            for ref in (node.get("discriminator") or {}).get("mapping", {}).values() if tag else ():
                member = components.get(ref.rsplit("/", 1)[-1])
                if member is not None and tag not in member.setdefault("required", []):
                    member["required"].insert(0, tag)
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(document)


PLANNED_KINDS = ("bound", "mia", "iclinf", "synthetic_generation")
"""The kinds POST /v1/audits/plan covers (app/audit/plan.py `plan_request`: every kind)."""


def _plan_body(document: dict[str, Any]) -> None:
    """planAudit's body is a submit's, narrowed to the kinds plans cover (issue 20 L1; today every kind):
    the route parses the whole union, so a body of a kind left out would keep its 422 at `$.kind`."""
    for operations in document.get("paths", {}).values():
        operation = operations.get("post") if isinstance(operations, dict) else None
        if not operation or operation.get("operationId") != "planAudit":
            continue
        content = operation["requestBody"]["content"]["application/json"]
        union = content["schema"]
        mapping = {k: v for k, v in union["discriminator"]["mapping"].items() if k in PLANNED_KINDS}
        content["schema"] = {
            **union,
            "oneOf": [{"$ref": ref} for ref in mapping.values()],
            "discriminator": {**union["discriminator"], "mapping": mapping},
        }
        examples = content.get("examples") or {}
        content["examples"] = {k: v for k, v in examples.items() if k in PLANNED_KINDS}


def install_openapi(app: FastAPI) -> None:
    """Serve a document with the security scheme and result examples (operation ids come from
    `operation_id`, the app's generate_unique_id_function)."""

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            description=app.description,
            routes=app.routes,
        )
        schemes = schema.setdefault("components", {}).setdefault("securitySchemes", {})
        schemes[BEARER] = {
            "type": "http",
            "scheme": "bearer",
            "description": "An API key from `iclaudit keys create --tenant NAME` (`ica_…`). Not needed when "
            "the service runs with ICLAUDIT_AUTH_ENABLED=false.",
        }
        examples = _result_examples()
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                if not isinstance(operation, dict):
                    continue
                if path.startswith("/v1/"):
                    operation.setdefault("security", [{BEARER: []}])
                if operation.get("operationId") == "getAuditResult" and examples:
                    content = operation.get("responses", {}).get("200", {}).setdefault("content", {})
                    content.setdefault("application/json", {})["examples"] = examples
        _require_discriminators(schema)
        _plan_body(schema)
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
