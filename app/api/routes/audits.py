"""/v1/audits: submit (202 + Location), read (ETag, 304, long-poll `wait`), list (summary or full view,
keyset pages), events (Server-Sent Events), cancel, result (JSON and PNG), JUnit report. Thin doorways
into app.jobs.submission, app.db.audits, app.db.polling, app.api.watch and app.reports."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

from fastapi import APIRouter, Body, Header, Query, Request, Response
from pydantic import BaseModel, ConfigDict, StringConstraints
from sqlalchemy.orm import Session
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask

from app.api.auth import Credentials, authenticator_of
from app.api.connections import plan_slots, stream_slots
from app.api.deps import (
    ExecutorDep,
    PageToken,
    RecordsView,
    SessionDep,
    SettingsDep,
    TenantDep,
)
from app.api.errors import ApiError
from app.api.headers import REPORT_CSP
from app.api.idempotency import IdempotencyKeyHeader, Remember, create_once
from app.api.middleware.strict_json import StrictJSONRoute
from app.api.poll import AnswerCache, PollCache, poll_cache_of
from app.api.sessions import run_in_session
from app.api.state import state_of
from app.api.watch import CACHE_CONTROL, WaitDep, etag_of, matches, watch_of
from app.audit.budget import BudgetSpec
from app.audit.kinds.base import MAX_LABELS, AuditRequestBase
from app.audit.kinds.registry import typed_result
from app.audit.stats.verdict import Outcome
from app.db import audits as audit_rows
from app.db import polling
from app.db.labels import having_labels
from app.db.models import TERMINAL_STATES, Audit, AuditState
from app.jobs import submission
from app.reports import plots
from app.schemas.audits import (
    AuditList,
    AuditResource,
    AuditResult,
    AuditSummary,
    AuditSummaryList,
    request_examples,
    request_union,
)
from app.schemas.errors import ErrorResponse, FieldViolation
from app.schemas.regression import Regression

router = APIRouter(prefix="/v1/audits", tags=["audits"], route_class=StrictJSONRoute)

if TYPE_CHECKING:  # the union is built at import from the kinds' registry: a type checker sees its base
    AuditRequest = AuditRequestBase
else:
    AuditRequest = request_union()
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse},
    404: {"model": ErrorResponse},
    422: {"model": ErrorResponse},
}


_NOT_MODIFIED: dict[int | str, dict[str, Any]] = {
    304: {"description": "Not modified: the audit still has the ETag given in `If-None-Match` (no body)."}
}
IfNoneMatch = Annotated[
    str | None,
    Header(description="An ETag from an earlier answer: 304 (no body) while the audit still has it."),
]


def _not_found(audit_id: str) -> ApiError:
    return ApiError(404, f"No audit {audit_id!r} (for this API key).")


def _json(model: BaseModel) -> Response:
    """200 with the model's JSON (rendered once, by pydantic)."""
    return Response(model.model_dump_json(), media_type="application/json")


def _not_modified(etag: str) -> Response:
    return Response(status_code=304, headers={"ETag": etag, "Cache-Control": CACHE_CONTROL})


Authorization = Annotated[str | None, Header(description="`Bearer ica_…` (from `iclaudit keys create`).")]


def _authenticated(
    session: Session, request: Request, authorization: str | None, read: Callable[..., Any], *args: Any
) -> tuple[str, Any]:
    """(tenant id, `read(session, tenant_id, *args)`): app.api.auth.Authenticator.tenant and the first read
    in one thread hop, for the routes that cannot hold TenantDep's session while they wait."""
    credentials = Credentials.of(request, authorization)
    tenant_id = authenticator_of(request.app).tenant(session, credentials)
    return tenant_id, read(session, tenant_id, *args)


async def _recheck(request: Request, authorization: str | None) -> None:
    """The caller's key read again (app.api.auth.Authenticator.recheck): 401 once it is revoked."""
    await run_in_session(
        request, authenticator_of(request.app).recheck, Credentials.of(request, authorization)
    )


LABEL_FILTER_PATTERN = r"^[^=]+="  # `key=value`: a key, then `=` (the value may be empty)


@router.post("", status_code=202, response_model=AuditResource, responses=_ERRORS)
def submit_audit(
    body: Annotated[AuditRequest, Body(openapi_examples=request_examples())],
    response: Response,
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    executor: ExecutorDep,
    idempotency_key: IdempotencyKeyHeader = None,
) -> AuditResource:
    """Start an audit. The body's `kind` picks the audit; answer 202 with the audit to poll. With an
    `Idempotency-Key`, a retry gets the first audit back (`Idempotent-Replayed: true`)."""

    def create(remember: Remember | None) -> str:
        return submission.submit_audit(
            session=session,
            tenant_id=tenant.id,
            request=body,
            settings=settings,
            executor=executor,
            on_stored=None if remember is None else lambda s, audit: remember(s, audit.id),
        ).id

    audit_id = create_once(
        session=session,
        tenant_id=tenant.id,
        key=idempotency_key,
        operation="submitAudit",
        body=body.model_dump(mode="json"),
        status_code=202,
        settings=settings,
        response=response,
        create=create,
    )
    audit = audit_rows.get_audit(session, tenant_id=tenant.id, audit_id=audit_id)
    assert audit is not None  # audits are never deleted
    response.headers["Location"] = f"/v1/audits/{audit.id}"
    response.headers["ETag"] = etag_of(audit)  # for a first `If-None-Match` / `?wait=` on Location
    return AuditResource.of(audit)


@router.get("", response_model=AuditSummaryList | AuditList, responses=_ERRORS)
def list_audits(
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    state: AuditState | None = None,
    kind: str | None = None,
    page_size: Annotated[int, Query(ge=1, le=500)] = 50,
    page_token: PageToken = None,
    view: Annotated[
        Literal["summary", "full"],
        Query(
            description="`summary` (default): each audit without its request body and result, with the "
            "claimed ε and a verdict digest. `full`: each audit whole, as `GET /v1/audits/{id}` (AIP-157); "
            "a full page stops early, with `next_page_token`, once its audits' request and result bodies add "
            "up past ICLAUDIT_LIST_MAX_BYTES (at least one audit per page)."
        ),
    ] = "summary",
    label: Annotated[
        list[Annotated[str, StringConstraints(pattern=LABEL_FILTER_PATTERN)]] | None,
        Query(
            max_length=MAX_LABELS,
            description="`key=value`: only audits with this label (repeat for several; all must match).",
        ),
    ] = None,
    verdict: Annotated[
        Outcome | None,
        Query(
            description="Only SUCCEEDED audits whose result has this verdict: violation, leak, inconclusive "
            "or consistent (the result's `verdict`, the summary's `verdict.outcome`)."
        ),
    ] = None,
    id_prefix: Annotated[
        str | None,
        Query(
            pattern="^[0-9a-f]{1,32}$",
            description="Only audits whose id starts with these hex digits (how the CLI resolves a short id).",
        ),
    ] = None,
) -> Response:
    """Newest first; pass `next_page_token` back as `page_token` for the next page."""
    filters: dict[str, Any] = {  # what both pages filter by
        "tenant_id": tenant.id,
        "state": state,
        "kind": kind,
        "where": [*_label_filter(label or []), *([Audit.id.startswith(id_prefix)] if id_prefix else [])],
        "verdict": verdict,
    }
    if view == "full":
        page = audit_rows.list_audits(
            session, **filters, page_size=page_size, page_token=page_token, max_bytes=settings.list_max_bytes
        )
        audits = [AuditResource.of(a) for a in page.items]
        return _json(AuditList(audits=audits, next_page_token=page.next_page_token))
    page = polling.summary_page(session, **filters, page_size=page_size, page_token=page_token)
    summaries = [AuditSummary.of(row) for row in page.items]
    return _json(AuditSummaryList(audits=summaries, next_page_token=page.next_page_token))


def _label_filter(given: list[str]) -> list[Any]:
    """`["team=ml", "run=42"]` → conditions on the audits' label rows; 422 naming a malformed one."""
    wanted = {}
    for i, item in enumerate(given):
        key, sep, value = item.partition("=")
        if not sep or not key:
            message = f"label {item!r} is not key=value."
            raise ApiError(422, message, [FieldViolation(path=f"query.label[{i}]", message=message)])
        wanted[key] = value
    return having_labels(wanted)


def _read_audit(
    session: Session,
    tenant_id: str,
    audit_id: str,
    if_none_match: str | None,
    poll: PollCache,
    keep_running: bool = False,
) -> tuple[str, str, Response | None]:
    """(ETag, state, answer): a finished audit rendered before from `poll` (no query); no answer while
    `If-None-Match` holds (the narrow mark read only); else the whole audit (its ETag taken from the same
    read as its body), kept in `poll` when finished, and when running with `keep_running` (app.api.poll)."""
    final = _finished_answer(poll.answers, tenant_id, audit_id, if_none_match)
    if final is not None:
        return final
    if if_none_match is not None:  # without one the whole row is read at once (one query, not two)
        mark = polling.get_mark(session, tenant_id=tenant_id, audit_id=audit_id)
        if mark is None:
            raise _not_found(audit_id)
        etag = etag_of(mark)
        if matches(if_none_match, etag):
            return etag, mark.state, None
    rendered = poll.render(session, tenant_id, audit_id, keep_running=keep_running)
    if rendered is None:
        raise _not_found(audit_id)
    etag, state, body = rendered
    return etag, state, _json_bytes(body, etag)


def _finished_answer(
    answers: AnswerCache, tenant_id: str, audit_id: str, if_none_match: str | None
) -> tuple[str, str, Response | None] | None:
    """`_read_audit`'s answer for a finished audit held in `answers` (its state is final), else None."""
    held = answers.finished(tenant_id, audit_id)
    if held is None:
        return None
    etag, state, body = held
    return etag, state, None if matches(if_none_match, etag) else _json_bytes(body, etag)


def _json_bytes(body: bytes, etag: str) -> Response:
    return Response(
        body, media_type="application/json", headers={"ETag": etag, "Cache-Control": CACHE_CONTROL}
    )


@router.get("/{audit_id}", response_model=AuditResource, responses={**_ERRORS, **_NOT_MODIFIED})
async def get_audit(
    audit_id: str,
    request: Request,
    wait: WaitDep,
    if_none_match: IfNoneMatch = None,
    authorization: Authorization = None,
) -> Response:
    """The audit, with a strong `ETag` that changes with its state, progress and result. `If-None-Match`
    → 304 while unchanged. `wait=30s` → long-poll: the answer comes when the audit changes (or the wait
    ends); no thread, database connection or request slot is held meanwhile."""
    watch, poll = watch_of(request.app), poll_cache_of(request.app)
    # A finished audit this tenant polled before, by a key verified moments ago: answered on the event
    # loop, with no thread, slot or database (limits still counted).
    auth, credentials = authenticator_of(request.app), Credentials.of(request, authorization)
    remembered = auth.remembered(credentials)
    if remembered is not None and (
        final := _finished_answer(poll.answers, remembered, audit_id, if_none_match)
    ):
        auth.count(credentials, remembered)
        etag, _, answer = final
        return answer if answer is not None else _not_modified(etag)
    since = watch.wakes
    # A long-poll without If-None-Match waits for a change from what the audit is now ("*": mark only).
    held = if_none_match or ("*" if wait > 0 else None)
    # One thread hop: authentication (from memory for a recently verified key), the mark, the body.
    tenant_id, (etag, state, answer) = await run_in_session(
        request, _authenticated, request, authorization, _read_audit, audit_id, held, poll, True
    )
    if answer is None and held != if_none_match and state in TERMINAL_STATES:
        etag, state, answer = await run_in_session(request, _read_audit, tenant_id, audit_id, None, poll)
    if answer is None and wait > 0 and state not in TERMINAL_STATES:
        release = stream_slots(request.app).take(tenant_id)  # 429 past ICLAUDIT_MAX_OPEN_STREAMS
        try:
            await _wait_rechecking(request, authorization, audit_id, etag, wait, since)
        finally:
            release()
        etag, state, answer = await run_in_session(
            request, _read_audit, tenant_id, audit_id, if_none_match, poll
        )
    return answer if answer is not None else _not_modified(etag)


async def _wait_rechecking(
    request: Request, authorization: str | None, audit_id: str, etag: str, timeout: float, since: int
) -> None:
    """`AuditWatch.changed` for up to `timeout` seconds, in slices of ICLAUDIT_KEY_RECHECK_SECONDS with the
    caller's key read again between them (`Authenticator.recheck`: 401 once it is revoked)."""
    watch = watch_of(request.app)
    clock = asyncio.get_running_loop().time
    deadline = clock() + timeout
    recheck = state_of(request.app).settings.key_recheck_seconds
    while (left := deadline - clock()) > 0:
        if await watch.changed(audit_id, etag, timeout=min(left, recheck), since=since):
            return
        since = watch.wakes
        if deadline - clock() > 0:
            await _recheck(request, authorization)


# One event of the stream (OpenAPI 3.1 reads a text/event-stream schema as one event's fields): an `audit`
# event whose `data` is the audit's summary as JSON and whose `id` is its ETag.
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["event", "data"],
    "properties": {
        "event": {"type": "string", "const": "audit"},
        "id": {"type": "string", "description": "The audit's ETag (send it back as `Last-Event-ID`)."},
        "data": {
            "type": "string",
            "contentMediaType": "application/json",
            "contentSchema": {"$ref": "#/components/schemas/AuditSummary"},
        },
        "retry": {"type": "integer"},
    },
}


@router.get(
    "/{audit_id}/events",
    response_class=EventSourceResponse,
    responses={
        **_ERRORS,
        200: {
            "description": "`text/event-stream`: an `audit` event (data: the summary view, `id`: its ETag) "
            "now and at every change of state or progress; the stream ends after a terminal state, or once the "
            "key is revoked (read again every ICLAUDIT_KEY_RECHECK_SECONDS, at most 30 s). "
            "`Last-Event-ID` (the last ETag seen) skips the first event while nothing changed.",
            "content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}},
        },
    },
)
async def audit_events(
    audit_id: str,
    request: Request,
    last_event_id: Annotated[str | None, Header(description="The `id` of the last event received.")] = None,
    authorization: Authorization = None,
) -> EventSourceResponse:
    """Server-Sent Events of the audit's state and progress until it finishes (each read in a brief
    session; nothing is held between events)."""
    watch = watch_of(request.app)
    since = watch.wakes
    tenant_id, row = await run_in_session(request, _authenticated, request, authorization, _summary, audit_id)
    if row is None:
        raise _not_found(audit_id)

    clock = asyncio.get_running_loop().time
    recheck = state_of(request.app).settings.key_recheck_seconds

    async def stream() -> AsyncIterator[ServerSentEvent]:
        nonlocal row, since
        etag = etag_of(row)
        if etag != last_event_id:
            yield ServerSentEvent(AuditSummary.of(row).model_dump_json(), event="audit", id=etag)
        checked = clock()
        while row is not None and row.state not in TERMINAL_STATES:
            await watch.changed(audit_id, etag, timeout=max(0.0, checked + recheck - clock()), since=since)
            since = watch.wakes
            try:
                if clock() - checked >= recheck:  # the key is read again (revoked: the stream ends)
                    await _recheck(request, authorization)
                    checked = clock()
                row = await run_in_session(request, _summary, tenant_id, audit_id)
            except ApiError:  # the key was revoked, or no slot within ICLAUDIT_API_QUEUE_SECONDS: end
                return
            if row is not None and etag_of(row) != etag:
                etag = etag_of(row)
                yield ServerSentEvent(AuditSummary.of(row).model_dump_json(), event="audit", id=etag)

    release = stream_slots(request.app).take(tenant_id)  # 429 past ICLAUDIT_MAX_OPEN_STREAMS

    async def held() -> AsyncIterator[ServerSentEvent]:
        try:
            async for event in stream():
                yield event
        finally:
            release()

    # released when the stream ends, and after the answer in any case (a stream never started)
    return EventSourceResponse(held(), ping=15, background=BackgroundTask(release))


@router.post("/plan", response_model=dict[str, Any], responses={**_ERRORS, 429: {"model": ErrorResponse}})
async def plan_audit(
    body: Annotated[AuditRequest, Body(openapi_examples=request_examples())],
    request: Request,
    authorization: Authorization = None,
) -> dict[str, Any]:
    """What this audit would cost and could resolve, without running it: model or endpoint calls, tokens,
    expected wall time from this deployment's finished audits, `epsilon_detectable` at the requested trials
    and the trials needed to resolve the claim (app/audit/plan.py). The same body and checks as a submit;
    nothing is stored and nothing is called. The plan is computed by a worker, not this process
    (app/jobs/plans.py): 503 if none answers in time. One plan at a time per tenant (429 while one is
    computed). A plan whose rehearsal would pass ICLAUDIT_PLAN_MAX_PAIRS is 422 before it starts; one still
    computing after ICLAUDIT_PLAN_TIMEOUT_SECONDS, or whose caller went away, is stopped where it runs."""
    import asyncio
    import threading

    from anyio import to_thread

    from app.jobs import plans

    tenant_id = await authenticator_of(request.app).caller(request, Credentials.of(request, authorization))
    with plan_slots.hold(tenant_id):
        settings = state_of(request.app).settings
        await run_in_session(request, plans.check_plan, tenant_id, body, settings)
        gone = threading.Event()

        async def watch() -> None:  # the caller hanging up stops its plan in the worker
            while not await request.is_disconnected():
                await asyncio.sleep(0.5)
            gone.set()

        watcher = asyncio.create_task(watch())
        try:
            answer = await to_thread.run_sync(
                plans.planner(state_of(request.app)).plan, tenant_id, body.model_dump(mode="json"), None, gone
            )
            return plans.plan_of(answer)
        except plans.PlanUnavailable as exc:
            raise ApiError(503, f"{exc}; retry later.", headers={"Retry-After": "30"}) from None
        finally:
            watcher.cancel()


class ResumeChanges(BaseModel):
    """What a resume may change: the budget (omit it to keep the audit's own; null removes it, down to the
    operator's ICLAUDIT_DEFAULT_BUDGET, which a tenant may only lower)."""

    model_config = ConfigDict(extra="forbid")

    budget: BudgetSpec | None = None


@router.post(
    "/{audit_id}/resume",
    status_code=202,
    response_model=AuditResource,
    responses={**_ERRORS, 409: {"model": ErrorResponse}},
)
def resume_audit(
    audit_id: str,
    response: Response,
    session: SessionDep,
    tenant: TenantDep,
    settings: SettingsDep,
    executor: ExecutorDep,
    body: Annotated[ResumeChanges | None, Body()] = None,
) -> AuditResource:
    """Resume a FAILED or budget-stopped audit as a new audit with the same request and seed: the endpoint
    calls already answered are replayed from the store, only the missing ones are sent (same result as an
    uninterrupted run). 409 for an audit in any other state."""
    changes = body.model_dump(mode="json", include=body.model_fields_set) if body is not None else None
    audit = submission.resume_audit(
        session=session,
        tenant_id=tenant.id,
        audit_id=audit_id,
        settings=settings,
        executor=executor,
        changes=changes,
    )
    if audit is None:
        raise _not_found(audit_id)
    response.headers["Location"] = f"/v1/audits/{audit.id}"
    return AuditResource.of(audit)


def _summary(session: Session, tenant_id: str, audit_id: str) -> Any:
    return polling.get_summary(session, tenant_id=tenant_id, audit_id=audit_id)


@router.post(
    "/{audit_id}/cancel", response_model=AuditResource, responses={**_ERRORS, 409: {"model": ErrorResponse}}
)
def cancel_audit(audit_id: str, session: SessionDep, tenant: TenantDep) -> AuditResource:
    """A PENDING audit is cancelled at once; a RUNNING one stops at its next batch (state CANCELLED)."""
    audit = submission.cancel_audit(session=session, tenant_id=tenant.id, audit_id=audit_id)
    if audit is None:
        raise _not_found(audit_id)
    return AuditResource.of(audit)


def _succeeded(session: SessionDep, tenant: TenantDep, audit_id: str) -> Audit:
    """The caller's audit with its result; 404 (with the reason) until it has SUCCEEDED."""
    audit = audit_rows.get_audit(session, tenant_id=tenant.id, audit_id=audit_id)
    if audit is None:
        raise _not_found(audit_id)
    if audit.state != AuditState.SUCCEEDED or audit.result is None:
        why = f": {audit.error['message']}" if audit.error else ""
        raise ApiError(404, f"Audit {audit_id} is {audit.state}{why}; a result exists once it has SUCCEEDED.")
    return audit


@router.get("/{audit_id}/result", response_model=AuditResult, responses={**_ERRORS, **_NOT_MODIFIED})
def get_result(
    audit_id: str,
    session: SessionDep,
    tenant: TenantDep,
    if_none_match: IfNoneMatch = None,
    records: RecordsView = "full",
) -> Response:
    """The result alone, with the audit's ETag (a result never changes); 404 until the audit has SUCCEEDED.
    `records=redacted` masks the records' text (what the dashboard shows; app/privacy/redact.py)."""
    from app.privacy.redact import redact_result

    def tagged(etag: str) -> str:  # each view its own tag, so a cached view never answers for the other
        return etag if records == "full" else f'{etag[:-1]}-redacted"'

    mark = polling.get_mark(session, tenant_id=tenant.id, audit_id=audit_id)
    if (
        mark is not None
        and mark.state == AuditState.SUCCEEDED
        and matches(if_none_match, tagged(etag_of(mark)))
    ):
        return _not_modified(tagged(etag_of(mark)))
    audit = _succeeded(session, tenant, audit_id)
    headers = {"ETag": tagged(etag_of(audit)), "Cache-Control": CACHE_CONTROL}
    shown = audit.result if records == "full" else redact_result(audit.result)
    typed = typed_result(audit.kind, shown)
    assert typed is not None  # _succeeded checked it
    return Response(typed.model_dump_json(), media_type="application/json", headers=headers)


@router.get(
    "/{audit_id}/result.png",
    response_class=Response,
    responses={**_ERRORS, 200: {"content": {"image/png": {}}, "description": "The result's plot."}},
)
def get_result_png(audit_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    """The result drawn as a PNG (app/reports/plots.py); 404 until the audit has SUCCEEDED."""
    audit = _succeeded(session, tenant, audit_id)
    assert audit.result is not None  # _succeeded refuses an audit without one
    try:
        png = plots.render(audit.kind, audit.request, audit.result)
    except plots.PlotError as exc:
        raise ApiError(404, str(exc)) from exc
    return Response(content=png, media_type="image/png")


@router.get(
    "/{audit_id}/report.html",
    response_class=Response,
    responses={**_ERRORS, 200: {"content": {"text/html": {}}, "description": "The report, one HTML file."}},
)
def get_report(
    audit_id: str, request: Request, session: SessionDep, tenant: TenantDep, records: RecordsView = "redacted"
) -> Response:
    """A report to share (app/reports/html.py): one self-contained HTML file — headline, request, method with
    references, results and charts, per-record table, reproduction lines, software version and commit — that
    opens offline and prints to PDF; 404 until the audit has SUCCEEDED. The records' text is redacted unless
    `records=full` (app/privacy/redact.py)."""
    from app.db.datasets import names_of
    from app.privacy.redact import redact_request, redact_result
    from app.reports import html as report

    audit = _succeeded(session, tenant, audit_id)
    full = records == "full"
    dataset_id = (audit.request or {}).get("dataset")
    named = names_of(session, tenant_id=tenant.id, dataset_ids=[dataset_id] if dataset_id else [])
    body = report.render(
        {
            "id": audit.id,
            "kind": audit.kind,
            "request": redact_request(audit.request, full=full),
            "result": redact_result(audit.result, full=full),
            "created_at": audit.created_at.isoformat(timespec="seconds"),
            "finished_at": audit.finished_at.isoformat(timespec="seconds") if audit.finished_at else None,
        },
        base_url=str(request.base_url).rstrip("/"),
        redacted=not full,
        dataset=f"{named[dataset_id][0]} v{named[dataset_id][1]}" if dataset_id in named else None,
    )
    name = f"iclaudit-report-{audit.id}.html"
    headers = {"Content-Disposition": f'inline; filename="{name}"', "Content-Security-Policy": REPORT_CSP}
    return Response(body, media_type="text/html", headers=headers)


@router.get(
    "/{audit_id}/report.junit.xml",
    response_class=Response,
    responses={
        **_ERRORS,
        409: {"model": ErrorResponse},
        200: {"content": {"application/xml": {}}, "description": "The audit as a JUnit XML report."},
    },
)
def get_audit_junit(audit_id: str, session: SessionDep, tenant: TenantDep) -> Response:
    """The ended audit as the CI gate's JUnit XML report (app/reports/junit.py): one test case per threat
    model, a failure for a violation or a leak, skipped when inconclusive, one error case when the audit
    FAILED or was CANCELLED. `iclaudit submit --junit` writes this file; 409 while the audit runs."""
    from app.reports.junit import junit_xml

    audit = audit_rows.get_audit(session, tenant_id=tenant.id, audit_id=audit_id)
    if audit is None:
        raise _not_found(audit_id)
    if audit.state not in TERMINAL_STATES:
        raise ApiError(409, f"Audit {audit_id} is {audit.state}; its JUnit report exists once it has ended.")
    name = f"iclaudit-{audit.id}.junit.xml"
    return Response(
        junit_xml([AuditResource.of(audit)]),
        media_type="application/xml",
        headers={"Content-Disposition": f'inline; filename="{name}"'},
    )


@router.get("/{audit_id}/regression", response_model=Regression, responses=_ERRORS)
def get_audit_regression(
    audit_id: str,
    session: SessionDep,
    tenant: TenantDep,
    baseline: Annotated[
        str, Query(description="The baseline audit's id (a SUCCEEDED audit of the same kind).")
    ],
) -> Regression:
    """Has the leakage risen since a baseline audit? Each membership test's lower bound on ε against the
    baseline's upper confidence bound on the ε of its test (app/audit/regression.py: what is compared, at
    what confidence); `regressed` when one exceeds the other. 404 until both have SUCCEEDED."""
    from app.audit.regression import RegressionError, compare

    audit = _succeeded(session, tenant, audit_id)
    base = _succeeded(session, tenant, baseline)
    if base.kind != audit.kind:
        raise ApiError(
            422,
            f"The baseline {baseline} is a {base.kind} audit; audit {audit_id} is {audit.kind}: compare audits "
            "of one kind.",
            [FieldViolation(path="query.baseline", message=f"not a {audit.kind} audit")],
        )
    try:
        found = compare(audit.result or {}, base.result or {})
    except RegressionError as exc:
        raise ApiError(422, f"{exc}.", [FieldViolation(path="query.baseline", message=str(exc))]) from exc
    return Regression(audit_id=audit.id, baseline_id=base.id, **found)
