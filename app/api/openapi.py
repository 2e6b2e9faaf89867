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

from app.schemas.errors import REFUSALS, ErrorResponse

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
    """planAudit's body is a submit's, narrowed to the kinds plans cover (today every kind):
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


_DOCUMENTED = {
    401: "No valid API key: send `Authorization: Bearer <key>`.",
    404: "No such resource (for this API key).",
    413: "The request body is larger than this route's limit: ICLAUDIT_MAX_REQUEST_BYTES (audits), "
    "ICLAUDIT_UPLOAD_MAX_BYTES (uploads) or ICLAUDIT_MAX_SMALL_REQUEST_BYTES (every other route); or a "
    "sweep would store more than ICLAUDIT_SWEEP_MAX_BYTES.",
    422: "Bad input: `details` gives the JSON path of each bad field.",
    429: "Over ICLAUDIT_RATE_LIMIT, ICLAUDIT_WRITE_RATE_LIMIT, the failed-authentication throttle, "
    "ICLAUDIT_MAX_ACTIVE_AUDITS or ICLAUDIT_MAX_SCHEDULES; retry after `Retry-After` seconds.",
    503: "Busy, or the database is unavailable for a moment; retry after `Retry-After` seconds.",
}
_RETRY_AFTER = {
    "Retry-After": {"description": "Seconds to wait before retrying.", "schema": {"type": "integer"}}
}


_SUBMIT = (
    "UNKNOWN_DATASET",
    "DATASET_UNAVAILABLE",
    "DATASET_UNLABELLED",
    "UNKNOWN_MODEL",
    "EGRESS_REFUSED",
    "SECRET_NOT_SET",
    "SECRET_INVALID",
    "SERVER_LIMIT",
    "NO_SOLUTION",
)  # an audit request's checks beyond its schema (app.jobs.checks.check_request)
OPERATION_REFUSALS: dict[str, tuple[str, ...]] = {
    "submitAudit": _SUBMIT,
    "planAudit": _SUBMIT,
    "resumeAudit": _SUBMIT,
    "submitSweep": (*_SUBMIT, "GRID_POINT_RULE"),
    "createSchedule": (*_SUBMIT, "GRID_POINT_RULE", "CRON_NEVER_FIRES"),
    "createWebhook": ("EGRESS_REFUSED",),
    "createMlflowSink": ("EGRESS_REFUSED",),
    "uploadDataset": ("UPLOAD_CONTENT",),
    "accountSyntheticGeneration": ("NO_SOLUTION",),
    "calibrateGaussian": ("NO_SOLUTION",),
}
"""operationId → the REFUSALS its 422 can name for a request its schema allows (documented as
`x-refusals`); a 422 of any other operation, or without `reason`, is a rule the schema states."""


def _refusal_answer(answer: dict[str, Any], reasons: dict[str, str]) -> None:
    """The 422 of an operation with `x-refusals`: its `reason` is one of them (or absent: a schema rule)."""
    answer["description"] = (
        "Bad input: `details` gives the JSON path of each bad field. A request its schema allows is refused "
        "only for the state of this server or arithmetic no schema can state, and `reason` then says which: "
        + "; ".join(f"`{code}`: {why}" for code, why in reasons.items())
    )
    reason = {"type": "string", "enum": list(reasons)}
    narrowed = {"properties": {"error": {"properties": {"reason": reason}}}}
    schema = {"allOf": [{"$ref": "#/components/schemas/ErrorResponse"}, narrowed]}
    answer["content"] = {"application/json": {"schema": schema}}


def _operation_errors(path: str, operation: dict[str, Any]) -> set[int]:
    """The error codes an operation can answer, from what it takes: a key (401, 429), a body (413, 422),
    parameters (422), a path id (404), the database (503)."""
    parameters = operation.get("parameters", [])
    authed = "security" in operation or any(
        p.get("in") == "header" and p.get("name", "").lower() == "authorization" for p in parameters
    )
    codes = {401, 429} if authed else set()
    if "requestBody" in operation:
        codes |= {413, 422}
    if parameters:
        codes.add(422)
    if "{" in path:
        codes.add(404)
    if path.startswith("/v1/"):
        codes.add(503)
    return codes


def document_error_responses(app: FastAPI) -> None:
    """Document, on every operation of the OpenAPI document, the error answers it can give (in the error
    shape, with Retry-After on 429/503), whoever added the route; an operation's own entry wins. Wraps
    whatever `app.openapi` is, so call it after anything else that customizes the document."""
    inner = app.openapi
    documented: list[int] = []  # id() of the document already done (inner() caches it)

    def openapi() -> dict[str, Any]:
        schema = inner()
        if id(schema) in documented:
            return schema
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        error_schema = ErrorResponse.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, definition in error_schema.pop("$defs", {}).items():
            components.setdefault(name, definition)
        components.setdefault("ErrorResponse", error_schema)
        ref = {"$ref": "#/components/schemas/ErrorResponse"}
        for path, operations in schema.get("paths", {}).items():
            for operation in operations.values():
                if not isinstance(operation, dict) or "responses" not in operation:
                    continue
                for code in sorted(_operation_errors(path, operation)):
                    answer: dict[str, Any] = {
                        "description": _DOCUMENTED[code],
                        "content": {"application/json": {"schema": ref}},
                    }
                    if code in (429, 503):
                        answer["headers"] = _RETRY_AFTER
                    operation["responses"].setdefault(str(code), answer)
                reasons = OPERATION_REFUSALS.get(operation.get("operationId", ""), ())
                if any(
                    p.get("name", "").lower() == "idempotency-key" for p in operation.get("parameters", [])
                ):
                    reasons = (*reasons, "IDEMPOTENCY_KEY_REUSED")  # app.api.idempotency
                if reasons:
                    operation["x-refusals"] = {reason: REFUSALS[reason] for reason in reasons}
                    _refusal_answer(operation["responses"]["422"], operation["x-refusals"])
                if path == "/readyz":
                    operation["responses"].setdefault(
                        "503",
                        {
                            "description": "Not ready: the database or the broker is unreachable (see `checks`).",
                            "content": {"application/json": {"schema": {"type": "object"}}},
                        },
                    )
        documented.append(id(schema))
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
