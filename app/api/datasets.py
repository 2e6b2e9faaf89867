"""/v1/datasets: upload a JSONL, CSV or JSON file (multipart, field `file`, optional `name`) or JSON rows; list,
read, delete. Parsed by app.datasets.validate; nothing is stored when a line is bad (422 names it)."""

from __future__ import annotations

import hashlib
import json
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from pydantic import ValidationError
from starlette.datastructures import UploadFile

from app.api.deps import SessionDep, SettingsDep, TenantDep
from app.api.errors import ApiError, validation_details
from app.api.idempotency import IdempotencyKeyHeader, Remember, create_once
from app.api.strict_json import StrictJSONRoute
from app.db import datasets as dataset_rows
from app.schemas.datasets import BuiltinDataset, DatasetList, DatasetResource, DatasetRows
from app.schemas.errors import ErrorResponse, FieldViolation

router = APIRouter(prefix="/v1/datasets", tags=["datasets"], route_class=StrictJSONRoute)
NAME_MAX = 200  # as DatasetRows.name (JSON uploads) and the VARCHAR(200) column

_UPLOAD_DOC: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "description": ".jsonl, .csv or .json",
                        },
                        "name": {"type": "string"},
                        "format": {"type": "string", "enum": ["jsonl", "csv", "json"]},
                    },
                }
            },
            "application/json": {
                "schema": DatasetRows.model_json_schema(),
                "example": {
                    "name": "my-reviews",
                    "rows": [
                        {"text": "great film", "label": "positive"},
                        {"text": "dull", "label": "negative"},
                    ],
                },
            },
        },
    }
}


def _format_of(filename: str, given: str | None) -> str:
    fmt = (given or filename.rsplit(".", 1)[-1]).lower()
    if fmt not in ("jsonl", "csv", "json"):
        raise ApiError(
            422,
            f"Cannot tell the format of {filename!r}: name it .jsonl, .csv or .json, or send `format`.",
            [FieldViolation(path="format", message="use jsonl, csv or json")],
        )
    return fmt


async def _read_upload(request: Request, max_bytes: int) -> tuple[bytes, str, str]:
    """(content, format, name) from a multipart file or a JSON body of rows."""
    content_type = request.headers.get("content-type", "")
    if content_type.startswith("multipart/form-data"):
        form = await request.form()
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise ApiError(
                422,
                "Send the dataset as the multipart field `file`.",
                [FieldViolation(path="file", message="required")],
            )
        content = await upload.read(max_bytes + 1)
        filename = upload.filename or "upload"
        given_format = form.get("format")
        fmt = _format_of(filename, given_format if isinstance(given_format, str) else None)
        given_name = form.get("name")
        if isinstance(given_name, str) and len(given_name) > NAME_MAX:
            message = f"name: at most {NAME_MAX} characters ({len(given_name)} given)."
            raise ApiError(422, message, [FieldViolation(path="name", message=message)])
        name = (
            given_name
            if isinstance(given_name, str) and given_name
            else filename.rsplit(".", 1)[0][:NAME_MAX]
        )
    elif content_type.startswith("application/json"):
        raw = await request.body()
        if len(raw) > max_bytes:
            content = raw
        else:
            try:
                rows = DatasetRows.model_validate_json(raw)
            except ValidationError as exc:
                details = validation_details([{**e, "loc": ("body", *e["loc"])} for e in exc.errors()])
                raise ApiError(422, details[0].message, details) from exc
            content = "\n".join(json.dumps(row, ensure_ascii=False) for row in rows.rows).encode()
            fmt, name = "jsonl", rows.name
    else:
        raise ApiError(
            415, "Send multipart/form-data with a `file`, or application/json with `name` and `rows`."
        )
    if len(content) > max_bytes:
        raise ApiError(413, f"The dataset is larger than {max_bytes} bytes (ICLAUDIT_UPLOAD_MAX_BYTES).")
    return content, fmt, name


@router.post(
    "",
    status_code=201,
    response_model=DatasetResource,
    openapi_extra=_UPLOAD_DOC,
    responses={
        404: {"model": ErrorResponse, "description": "A replayed key whose dataset was deleted since."},
        413: {"model": ErrorResponse},
        422: {"model": ErrorResponse},
    },
)
async def upload_dataset(
    request: Request,
    response: Response,
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> DatasetResource:
    from app.datasets.validate import DatasetValidationError, parse_dataset

    content, fmt, name = await _read_upload(request, settings.upload_max_bytes)
    from_rows = request.headers.get("content-type", "").startswith("application/json")
    try:
        dataset = parse_dataset(content, fmt=fmt, name=name, max_rows=settings.upload_max_rows)
    except DatasetValidationError as exc:
        if from_rows and exc.line:  # JSON rows: line N is rows[N-1]
            path = f"$.rows[{exc.line - 1}]" + (f".{exc.field}" if exc.field else "")
        else:
            path = "file" + (f":{exc.line}" if exc.line else "")
        raise ApiError(
            422, f"The dataset was not stored: {exc}.", [FieldViolation(path=path, message=str(exc))]
        ) from exc

    def create(remember: Remember | None) -> str:
        row = dataset_rows.add_dataset(
            session,
            tenant_id=tenant.id,
            name=name,
            format=fmt,
            task=dataset.task,
            labels=list(dataset.labels),
            n_train=len(dataset.train),
            n_test=len(dataset.test),
            size_bytes=len(content),
            content=content,
        )
        if remember is not None:
            remember(session, row.id)
        session.commit()
        return row.id

    dataset_id = create_once(
        session=session,
        tenant_id=tenant.id,
        key=idempotency_key,
        operation="uploadDataset",
        body={"name": name, "format": fmt, "sha256": hashlib.sha256(content).hexdigest()},
        status_code=201,
        settings=settings,
        response=response,
        create=create,
    )
    row = dataset_rows.get_dataset(session, tenant_id=tenant.id, dataset_id=dataset_id)
    if row is None:  # the key's first upload was deleted since
        raise ApiError(
            404, f"Dataset {dataset_id} made with this Idempotency-Key was deleted; send a new key."
        )
    response.headers["Location"] = f"/v1/datasets/{row.id}"
    return DatasetResource.model_validate(row)


@router.get("", response_model=DatasetList)
def list_datasets(
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: str | None = None,
) -> DatasetList:
    """Your uploads (keyset pages), and the built-in names with whether this server can load each."""
    from app.datasets.builtin import BUILTIN_NAMES, SYNTHETIC_NAME, availability

    builtins = []
    for name in (SYNTHETIC_NAME, *BUILTIN_NAMES):
        source, reason = availability(name, settings.data_dir)
        builtins.append(
            BuiltinDataset(name=name, available=source is not None, source=source, reason=reason)  # type: ignore[arg-type]
        )
    page = dataset_rows.list_datasets(
        session, tenant_id=tenant.id, page_size=page_size, page_token=page_token
    )
    return DatasetList(
        datasets=[DatasetResource.model_validate(r) for r in page.items],
        next_page_token=page.next_page_token,
        builtins=builtins,
    )


@router.get("/{dataset_id}", response_model=DatasetResource, responses={404: {"model": ErrorResponse}})
def get_dataset(dataset_id: str, session: SessionDep, tenant: TenantDep) -> DatasetResource:
    row = dataset_rows.get_dataset(session, tenant_id=tenant.id, dataset_id=dataset_id)
    if row is None:
        raise ApiError(404, f"No dataset {dataset_id!r} (for this API key).")
    return DatasetResource.model_validate(row)


@router.delete("/{dataset_id}", status_code=204, responses={404: {"model": ErrorResponse}})
def delete_dataset(dataset_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    if not dataset_rows.delete_dataset(session, tenant_id=tenant.id, dataset_id=dataset_id):
        raise ApiError(404, f"No dataset {dataset_id!r} (for this API key).")
    session.commit()
    return Response(status_code=204)
