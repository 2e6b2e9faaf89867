"""/v1/audits/{id}/records: the per-record risk table of an audit over several canaries (app/audit/stats/records.py),
riskiest first, paged (`offset`, `limit`) as JSON or the whole table as CSV (`format=csv`), the records' text
redacted unless `records=full` (app/privacy/redact.py). Tenant-scoped: another tenant's audit is a 404."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field

from app.api.deps import RecordsView, SessionDep, TenantDep
from app.api.errors import ApiError
from app.audit.results.mia import RecordRisk
from app.audit.stats.records import records_csv
from app.csv_cells import safe_row
from app.db import audits as audit_rows
from app.db.models import AuditState
from app.privacy.redact import redact_result
from app.schemas.errors import ErrorResponse

router = APIRouter(prefix="/v1/audits", tags=["audits"])

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorResponse, "description": "No or an unknown API key."},
    404: {
        "model": ErrorResponse,
        "description": "No such audit for this API key, not SUCCEEDED, or no table.",
    },
    422: {"model": ErrorResponse, "description": "A bad parameter (the path names it)."},
}


class RecordPage(BaseModel):
    """One page of the per-record table."""

    audit_id: str
    total: int = Field(description="Records in the table.")
    flagged: int = Field(description="Records flagged as leaking (Bonferroni over the records).")
    offset: int
    limit: int
    items: list[RecordRisk]


@router.get(
    "/{audit_id}/records",
    response_model=RecordPage,
    responses={**_ERRORS, 200: {"content": {"text/csv": {}}, "description": "The table (JSON page or CSV)."}},
)
def get_records(
    audit_id: str,
    session: SessionDep,
    tenant: TenantDep,
    offset: Annotated[int, Query(ge=0, description="Rows to skip (riskiest first).")] = 0,
    limit: Annotated[int, Query(ge=1, le=500, description="Rows per page.")] = 50,
    format: Annotated[
        Literal["json", "csv"], Query(description="json (one page) or csv (all rows).")
    ] = "json",
    records: RecordsView = "redacted",
) -> Any:
    """Per-record risk (record id and hash, score statistics, its own ε lower bound and p-value, flagged);
    the records' text with personal data masked unless `records=full`."""
    audit = audit_rows.get_audit(session, tenant_id=tenant.id, audit_id=audit_id)
    if audit is None:
        raise ApiError(404, f"No audit {audit_id!r} (for this API key).")
    if audit.state != AuditState.SUCCEEDED or audit.result is None:
        raise ApiError(404, f"Audit {audit_id} is {audit.state}; its records exist once it has SUCCEEDED.")
    rows = (redact_result(audit.result, full=records == "full") or {}).get("records")
    if rows is None:
        raise ApiError(
            404,
            f"Audit {audit_id} has no per-record table (audits over several canaries have one, e.g. "
            "attack likelihood).",
        )
    if format == "csv":
        return Response(
            records_csv([safe_row(row) for row in rows]),  # no cell a spreadsheet would run
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{audit_id}-records.csv"'},
        )
    return RecordPage(
        audit_id=audit_id,
        total=len(rows),
        flagged=sum(bool(r.get("flagged")) for r in rows),
        offset=offset,
        limit=limit,
        items=[RecordRisk.model_validate(r) for r in rows[offset : offset + limit]],
    )
