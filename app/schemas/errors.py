"""The error body of every 4xx/5xx answer (AIP-193 shape): a sentence, and the JSON path of each bad field.

`reason` marks a 422 that no JSON Schema could have predicted: the request is valid by the OpenAPI document
and was refused for the state of this server or arithmetic beyond a schema (`REFUSALS`). Each operation
that can give one lists its reasons in the OpenAPI (`x-refusals`, and the enum of its 422's `reason`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

REFUSALS: dict[str, str] = {
    "UNKNOWN_DATASET": "The dataset is neither built in nor one this tenant uploaded (GET /v1/datasets).",
    "DATASET_UNAVAILABLE": "A built-in dataset this server cannot load (ICLAUDIT_DATA_DIR).",
    "DATASET_UNLABELLED": "The audit reads labels and the uploaded dataset has none.",
    "UNKNOWN_MODEL": "The model is not registered on this server (GET /v1/models).",
    "EGRESS_REFUSED": "A URL this server's egress policy refuses (its host, address or allow-list).",
    "SECRET_NOT_SET": "A header's secret reference names a secret not set for (or not granted to) this tenant.",
    "SECRET_INVALID": "A header's secret is set but its value cannot be sent in a header (the operator's to fix).",
    "SERVER_LIMIT": "Above a limit this server is configured with (ICLAUDIT_MAX_TRIALS, "
    "ICLAUDIT_MAX_LLM_CALLS, ICLAUDIT_SWEEP_MAX_AUDITS, ICLAUDIT_SCHEDULE_MIN_INTERVAL_SECONDS, "
    "ICLAUDIT_TARGET_MAX_BODY_BYTES, ICLAUDIT_PLAN_MAX_PAIRS).",
    "GRID_POINT_RULE": "A sweep's point (base with each grid key's value set) breaks a rule of its kind across "
    "fields, though base and each value meet their own schemas.",
    "CRON_NEVER_FIRES": "A well-formed cron that no date matches (e.g. 0 0 31 2 *).",
    "NO_SOLUTION": "The accountant's arithmetic has no finite answer (e.g. a target ε not reachable at δ).",
    "IDEMPOTENCY_KEY_REUSED": "The Idempotency-Key was first used with a different request body.",
    "UPLOAD_CONTENT": "The uploaded file's contents: its format (from `format` or the file name) or rows.",
}


NO_SOLUTION = "no_solution"
"""The type of a pydantic error for arithmetic no schema states (a request's target ε no parameter reaches):
answered 422 with reason NO_SOLUTION."""


class FieldViolation(BaseModel):
    path: str  # JSON path into the request body, e.g. "$.mechanism.epsilon"; "query.page_size" for parameters
    message: str


class ErrorBody(BaseModel):
    code: int
    status: str
    message: str
    details: list[FieldViolation] = []
    reason: str | None = Field(
        default=None,
        description="Only on a 422 for a request its schema allows: why (one of the operation's x-refusals).",
    )


class ErrorResponse(BaseModel):
    error: ErrorBody
