"""The CPU-heavy half of a dataset upload, run in another process.

Checking a 40 MB upload is seconds of Python (a JSON parse per row, the row rules). In a thread of the API
process it would hold the interpreter lock for most of that time, and the event loop, which needs the
lock back after every system call, answered `/healthz` in 200-300 ms meanwhile; in a process of its own
(`app.api.routes.datasets` keeps a small spawn pool) it costs the API process nothing but a pipe copy of the
bytes. This module imports no web or database code: a spawned worker imports only what checking needs.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Checked:
    """An accepted upload: what to store and what the dataset's row says about it."""

    content: bytes | None  # None: store the bytes as sent; else the rows as JSONL (a JSON upload)
    name: str
    task: str
    labels: tuple[str, ...]
    n_train: int
    n_test: int


@dataclass(frozen=True)
class UploadRefused:
    """A refused upload: 413 over the size limit, 422 with the bad line or field (`path`) or, for JSON rows,
    pydantic's errors (plain dicts, picklable)."""

    status: int
    message: str
    path: str | None = None
    detail: str = ""
    errors: list[dict[str, Any]] = field(default_factory=list)


def _plain(error: Mapping[str, Any]) -> dict[str, Any]:
    """A pydantic error without its input (the whole body, perhaps) and with its context as text."""
    out: dict[str, Any] = {k: error[k] for k in ("loc", "msg", "type") if k in error}
    if error.get("ctx"):
        out["ctx"] = {k: str(v) for k, v in error["ctx"].items()}
    return out


def check(
    content: bytes, *, from_rows: bool, fmt: str, name: str, max_rows: int, max_bytes: int
) -> Checked | UploadRefused:
    """Validate an upload (app.datasets.validate): the file's bytes (`fmt`), or a JSON body `{name, rows}`
    (`from_rows`), whose rows become the JSONL that is stored."""
    from pydantic import ValidationError

    from app.datasets.validate import ROW_FORMAT, DatasetValidationError, parse_dataset
    from app.schemas.datasets import DatasetRows

    stored: bytes | None = None
    if from_rows:
        try:
            rows = DatasetRows.model_validate_json(content)
        except ValidationError as exc:
            errors = [{**_plain(e), "loc": ("body", *e["loc"])} for e in exc.errors()]
            return UploadRefused(422, "The JSON body is not {name, rows}.", errors=errors)
        stored = "\n".join(json.dumps(row, ensure_ascii=False) for row in rows.rows).encode()
        fmt, name = "jsonl", rows.name
    size = len(stored if stored is not None else content)
    if size > max_bytes:
        return UploadRefused(
            413, f"The dataset is larger than {max_bytes} bytes (ICLAUDIT_UPLOAD_MAX_BYTES)."
        )
    try:
        dataset = parse_dataset(stored or content, fmt=fmt, name=name, max_rows=max_rows)  # type: ignore[arg-type]
    except DatasetValidationError as exc:
        if from_rows and exc.line:  # JSON rows: line N is rows[N-1]
            path = f"$.rows[{exc.line - 1}]" + (f".{exc.field}" if exc.field else "")
        else:
            path = "file" + (f":{exc.line}" if exc.line else "")
        message = f"The dataset was not stored: {exc}. ({ROW_FORMAT}.)"
        return UploadRefused(422, message, path=path, detail=str(exc))
    return Checked(
        content=stored,
        name=name,
        task=dataset.task,
        labels=tuple(dataset.labels),
        n_train=len(dataset.train),
        n_test=len(dataset.test),
    )
