"""/v1/datasets: upload a JSONL, CSV or JSON file (multipart, field `file`, optional `name`) or JSON rows; list,
read, delete. Parsed by app.datasets.validate; nothing is stored when a line is bad (422 names it)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import multiprocessing
import re
import tempfile
from collections.abc import AsyncIterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import IO, Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Header, Query, Request, Response
from python_multipart import parse_form
from python_multipart.exceptions import FormParserError
from sqlalchemy.orm import Session

from app.api import upload_worker
from app.api.auth import Credentials, authenticator_of
from app.api.deps import PageToken, SessionDep, SettingsDep, TenantDep
from app.api.errors import ApiError, validation_details
from app.api.idempotency import IdempotencyKeyHeader, Remember, create_once
from app.api.middleware.strict_json import StrictJSONRoute
from app.api.poll import forget_finished
from app.api.sessions import run_in_session
from app.api.state import state_of
from app.api.upload_worker import Checked
from app.config import Settings
from app.db import datasets as dataset_rows
from app.db.audits import lock_tenant
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
                        "name": {"type": "string", "maxLength": NAME_MAX},
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
            reason="UPLOAD_CONTENT",
        )
    return fmt


SPOOL_MEMORY_BYTES = 2**20
"""An upload is held in memory up to this size while it streams in, then on disk (a spooled temp file)."""
WRITE_BYTES = 2**20
"""Received body pieces are written to the spool in a worker thread once this many bytes are pending."""
UPLOAD_RETRY_SECONDS = 5
UPLOAD_CHECKERS = 2
"""Processes that check uploads (spawned at the first upload); more uploads at once wait for one."""


@dataclass(frozen=True)
class _Upload:
    content: bytes
    fmt: str
    name: str
    from_rows: bool


@contextlib.asynccontextmanager
async def _upload_slot(request: Request, tenant_id: str) -> AsyncIterator[None]:
    """One of the tenant's ICLAUDIT_MAX_CONCURRENT_UPLOADS in this process (counted on the event loop), or
    429 at once with the body unread."""
    state = state_of(request.app)
    streaming = state.uploads_streaming
    limit = state.settings.max_concurrent_uploads
    held = streaming.get(tenant_id, 0)
    if held >= limit:
        raise ApiError(
            429,
            f"This tenant already has {held} dataset uploads in progress here; at most {limit} at once "
            "(ICLAUDIT_MAX_CONCURRENT_UPLOADS). Retry when one has finished.",
            headers={"Retry-After": str(UPLOAD_RETRY_SECONDS), "Connection": "close"},
        )
    streaming[tenant_id] = held + 1
    try:
        yield
    finally:
        streaming[tenant_id] -= 1
        if not streaming[tenant_id]:
            del streaming[tenant_id]


async def _spool(request: Request, spool: IO[bytes]) -> None:
    """The request body into `spool`, written in a worker thread a megabyte at a time; no session or request
    slot is held (app.api.middleware.body_limit.BodyLimit bounds its size and the wait for each piece)."""
    pending: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        pending.append(chunk)
        size += len(chunk)
        if size >= WRITE_BYTES:
            await to_thread.run_sync(spool.write, b"".join(pending))
            pending, size = [], 0
    if pending:
        await to_thread.run_sync(spool.write, b"".join(pending))


def _parse_upload(spool: IO[bytes], content_type: str, max_bytes: int) -> _Upload:
    """(content, format, name) of a multipart body with the file `file` (and `name`, `format`), or a JSON
    body of rows (checked in the worker), read from `spool` in a worker thread."""
    spool.seek(0)
    if content_type.startswith("application/json"):
        raw = spool.read()
        if len(raw) > max_bytes:
            raise ApiError(413, f"The dataset is larger than {max_bytes} bytes (ICLAUDIT_UPLOAD_MAX_BYTES).")
        return _Upload(raw, "jsonl", "", from_rows=True)
    if not content_type.startswith("multipart/form-data"):
        raise ApiError(
            415, "Send multipart/form-data with a `file`, or application/json with `name` and `rows`."
        )
    fields: dict[str, str] = {}
    files: dict[str, tuple[str, bytes]] = {}

    def on_field(part: Any) -> None:
        fields[part.field_name.decode("utf-8", "replace")] = (part.value or b"").decode("utf-8", "replace")

    def on_file(part: Any) -> None:
        part.file_object.seek(0)
        filename = (part.file_name or b"upload").decode("utf-8", "replace")
        files[part.field_name.decode("utf-8", "replace")] = (filename, part.file_object.read(max_bytes + 1))

    try:
        parse_form({"Content-Type": content_type.encode("latin-1")}, spool, on_field, on_file)
    except (FormParserError, ValueError) as exc:
        raise ApiError(
            422,
            f"The multipart body could not be parsed ({type(exc).__name__}).",
            [FieldViolation(path="file", message="not a multipart/form-data body")],
        ) from exc
    if "file" not in files:
        raise ApiError(
            422,
            "Send the dataset as the multipart field `file`.",
            [FieldViolation(path="file", message="required")],
        )
    filename, content = files["file"]
    if len(content) > max_bytes:
        raise ApiError(413, f"The dataset is larger than {max_bytes} bytes (ICLAUDIT_UPLOAD_MAX_BYTES).")
    fmt = _format_of(filename, fields.get("format"))
    given_name = fields.get("name")
    if given_name is not None and len(given_name) > NAME_MAX:
        message = f"name: at most {NAME_MAX} characters ({len(given_name)} given)."
        raise ApiError(422, message, [FieldViolation(path="name", message=message)])
    return _Upload(content, fmt, given_name or filename.rsplit(".", 1)[0][:NAME_MAX], from_rows=False)


def _checking_pool(app: Any) -> ProcessPoolExecutor:
    """The app's pool of UPLOAD_CHECKERS spawned processes that check uploads (made on first use, on the
    event loop; shut down with the app: `close_checking_pool`)."""
    state = state_of(app)
    if state.upload_checkers is None:
        state.upload_checkers = ProcessPoolExecutor(
            UPLOAD_CHECKERS, mp_context=multiprocessing.get_context("spawn")
        )
    return state.upload_checkers


def close_checking_pool(app: Any) -> None:
    state = state_of(app)
    if state.upload_checkers is not None:
        state.upload_checkers.shutdown(wait=False, cancel_futures=True)
        state.upload_checkers = None


async def _checked(app: Any, upload: _Upload, settings: Settings) -> Checked:
    """The upload validated in a checking process (app.api.upload_worker), or its refusal raised."""
    job = functools.partial(
        upload_worker.check,
        upload.content,
        from_rows=upload.from_rows,
        fmt=upload.fmt,
        name=upload.name,
        max_rows=settings.upload_max_rows,
        max_bytes=settings.upload_max_bytes,
    )
    answer = await asyncio.get_running_loop().run_in_executor(_checking_pool(app), job)
    if isinstance(answer, Checked):
        return answer
    if answer.errors:
        details = validation_details(answer.errors)
        raise ApiError(422, details[0].message, details)
    if answer.path is not None:
        detail = [FieldViolation(path=answer.path, message=answer.detail)]
        raise ApiError(answer.status, answer.message, detail, reason="UPLOAD_CONTENT")
    raise ApiError(answer.status, answer.message)


def _check_name(name: str) -> None:
    """A name must not stand for something else as a request's `dataset`: a built-in name or an id."""
    from app.datasets.builtin import BUILTIN_NAMES, SYNTHETIC_NAME

    if name in (SYNTHETIC_NAME, *BUILTIN_NAMES):
        why = f"name: {name!r} is a built-in dataset's name; choose another (a request's `dataset` must mean one thing)."
    elif re.fullmatch(r"[0-9a-f]{32}", name):
        why = "name: 32 hexadecimal digits read as a dataset id; choose another name."
    else:
        return
    raise ApiError(422, why, [FieldViolation(path="name", message=why)], reason="UPLOAD_CONTENT")


def _store(
    session: Session,
    tenant_id: str,
    content: bytes,
    fmt: str,
    checked: Checked,
    settings: Settings,
    response: Response,
    idempotency_key: str | None,
) -> DatasetResource:
    """Store the checked upload (once per Idempotency-Key) and answer it: the only step under a session."""

    def create(remember: Remember | None) -> str:
        lock_tenant(session, tenant_id=tenant_id)  # two uploads of one name at once: two versions
        row = dataset_rows.add_dataset(
            session,
            tenant_id=tenant_id,
            name=checked.name,
            format=fmt,
            task=checked.task,
            labels=list(checked.labels),
            n_train=checked.n_train,
            n_test=checked.n_test,
            size_bytes=len(content),
            content=content,
        )
        if remember is not None:
            remember(session, row.id)
        session.commit()
        return row.id

    dataset_id = create_once(
        session=session,
        tenant_id=tenant_id,
        key=idempotency_key,
        operation="uploadDataset",
        body={"name": checked.name, "format": fmt, "sha256": hashlib.sha256(content).hexdigest()},
        status_code=201,
        settings=settings,
        response=response,
        create=create,
    )
    row = dataset_rows.get_dataset(session, tenant_id=tenant_id, dataset_id=dataset_id)
    if row is None:  # the key's first upload was deleted since
        raise ApiError(
            404, f"Dataset {dataset_id} made with this Idempotency-Key was deleted; send a new key."
        )
    response.headers["Location"] = f"/v1/datasets/{row.id}"
    previous = dataset_rows.previous_version(session, row)
    return DatasetResource.model_validate(row).model_copy(
        update={"replaces": previous.id if previous is not None else None}
    )


@router.post(
    "",
    status_code=201,
    response_model=DatasetResource,
    openapi_extra=_UPLOAD_DOC,
    responses={
        404: {"model": ErrorResponse, "description": "A replayed key whose dataset was deleted since."},
        413: {"model": ErrorResponse},
        422: {"model": ErrorResponse},
        429: {
            "model": ErrorResponse,
            "description": "Over ICLAUDIT_MAX_CONCURRENT_UPLOADS, or a rate limit.",
        },
    },
)
async def upload_dataset(
    request: Request,
    response: Response,
    settings: SettingsDep,
    idempotency_key: IdempotencyKeyHeader = None,
    authorization: Annotated[
        str | None, Header(description="`Bearer ica_…` (from `iclaudit keys create`).")
    ] = None,
) -> DatasetResource:
    """The caller is known before a byte of the body is read (app/api/middleware/auth_first.py); the body then streams into a
    spooled temp file with no database session or request slot held (at most ICLAUDIT_MAX_CONCURRENT_UPLOADS
    per tenant at once, else 429), its multipart is read in a worker thread and its rows are checked in a
    separate process (app/api/upload_worker.py), so the event loop parses nothing; only storing it takes a
    session."""
    tenant_id = await authenticator_of(request.app).caller(request, Credentials.of(request, authorization))
    content_type = request.headers.get("content-type", "")
    async with _upload_slot(request, tenant_id):
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_MEMORY_BYTES) as spool:
            await _spool(request, spool)
            upload = await to_thread.run_sync(_parse_upload, spool, content_type, settings.upload_max_bytes)
        checked = await _checked(request.app, upload, settings)
    _check_name(checked.name)
    content = checked.content if checked.content is not None else upload.content
    fmt = "jsonl" if upload.from_rows else upload.fmt
    return await run_in_session(
        request, _store, tenant_id, content, fmt, checked, settings, response, idempotency_key
    )


@router.get("", response_model=DatasetList)
def list_datasets(
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: PageToken = None,
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
def delete_dataset(
    dataset_id: str,
    request: Request,
    session: SessionDep,
    tenant: TenantDep,
    purge: Annotated[
        bool,
        Query(
            description="Also purge what audits stored from it: the record text of every audit of yours that "
            "read it (its figures, record ids and hashes stay; an audit still running is cancelled) and the "
            "target responses they stored for resume."
        ),
    ] = False,
) -> Response:
    """Delete an upload (the audits that read it keep their results unless `purge`). Another tenant's id is
    a 404, as an unknown one."""
    from app.db import audits as audit_rows
    from app.db import responses

    if not dataset_rows.delete_dataset(session, tenant_id=tenant.id, dataset_id=dataset_id):
        raise ApiError(404, f"No dataset {dataset_id!r} (for this API key).")
    purged: list[str] = []
    if purge:
        purged = audit_rows.purge_dataset_records(session, tenant_id=tenant.id, dataset_id=dataset_id)
        responses.purge_lineages(session, purged)
    session.commit()
    forget_finished(request.app, tenant.id, purged)  # this process's kept answers of them
    return Response(status_code=204)
