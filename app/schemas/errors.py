"""The error body of every 4xx/5xx answer (AIP-193 shape): a sentence, and the JSON path of each bad field."""

from __future__ import annotations

from pydantic import BaseModel


class FieldViolation(BaseModel):
    path: str  # JSON path into the request body, e.g. "$.mechanism.epsilon"; "query.page_size" for parameters
    message: str


class ErrorBody(BaseModel):
    code: int
    status: str
    message: str
    details: list[FieldViolation] = []


class ErrorResponse(BaseModel):
    error: ErrorBody
