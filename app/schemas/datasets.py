"""Uploaded datasets: the JSON-rows request body and the resource returned."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class DatasetRows(BaseModel):
    """`POST /v1/datasets` with `Content-Type: application/json` (files go as multipart, field `file`)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    rows: list[dict[str, Any]] = Field(
        description="Objects with `text` and `label` (or `summary`), as in JSONL."
    )


class DatasetResource(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: str = Field(description="Use it (or the name) as `dataset` in an audit request.")
    name: str = Field(
        description="Unique per tenant up to its version: as `dataset` in a request, the name means its newest "
        "version (resolved when the audit is submitted; the audit stores the id)."
    )
    version: int = Field(description="1 for a new name; uploading a name again stores the next version.")
    replaces: str | None = Field(
        default=None,
        description="On upload: the id of the version this one supersedes as the name's newest (null for a "
        "new name).",
    )
    format: Literal["jsonl", "csv", "json"]
    task: str
    labels: list[str]
    n_train: int
    n_test: int
    size_bytes: int
    created_at: datetime


class BuiltinDataset(BaseModel):
    name: str = Field(description="Use it as `dataset` in an audit request.")
    available: bool = Field(description="Whether this server can load it now.")
    source: Literal["synthetic", "data_dir", "package", "hub"] | None = Field(
        description="synthetic: generated; data_dir: an offline copy in ICLAUDIT_DATA_DIR; package: the copy "
        "shipped with iclaudit (dbpedia14, CC BY-SA); hub: downloaded."
    )
    reason: str = Field(description="Why it is unavailable (empty when available).")


class DatasetList(BaseModel):
    datasets: list[DatasetResource] = Field(description="Your uploaded datasets.")
    next_page_token: str | None
    builtins: list[BuiltinDataset] = Field(
        default_factory=list, description="The built-in datasets and whether each can be loaded here."
    )
