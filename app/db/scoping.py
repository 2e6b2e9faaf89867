"""What every tenant-facing query shares: `owned(model, tenant_id)`, the one place tenant scoping happens
(another tenant's id is simply not found), and keyset pages with page tokens (PAGE_TOKEN_PATTERN)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.orm import Session

from app.db.models import (
    Audit,
    MlflowSink,
    Schedule,
    Sweep,
    UploadedDataset,
    WebhookDelivery,
    WebhookEndpoint,
)

Owned = TypeVar(
    "Owned", Audit, UploadedDataset, WebhookEndpoint, WebhookDelivery, Sweep, Schedule, MlflowSink
)


class InvalidPageToken(ValueError):
    """A page token that this service did not issue."""


def owned(model: type[Owned], tenant_id: str) -> Select[Owned]:
    """THE tenant filter: every tenant-facing query starts here."""
    return select(model).where(model.tenant_id == tenant_id)


@dataclass(frozen=True)
class Page:
    items: Sequence[Any]
    next_page_token: str | None


PAGE_TOKEN_PATTERN = r"^[0-9]{1,16}\.[0-9A-Za-z_-]{1,64}$"
"""A page token: the last shown row's created_at (microseconds since the epoch) and id. Any token of this
shape is a position to go on from (a forged one shows nothing the tenant cannot list), so the OpenAPI
document states the whole rule as the parameter's pattern."""

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def encode_page_token(created_at: datetime, row_id: str) -> str:
    delta = created_at - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    return f"{micros}.{row_id}"


def decode_page_token(token: str) -> tuple[datetime, str]:
    """(created_at, id) from a token of PAGE_TOKEN_PATTERN's shape; InvalidPageToken for anything else."""
    if not re.fullmatch(PAGE_TOKEN_PATTERN, token):
        raise InvalidPageToken("page_token is not a token returned by this service")
    micros, row_id = token.split(".", 1)
    return _EPOCH + timedelta(microseconds=int(micros)), row_id


def _after(query: Select[Any], model: Any, page_token: str | None) -> Select[Any]:
    """`query` restricted to the rows after the token's (created_at, id), newest first."""
    if not page_token:
        return query
    created_at, row_id = decode_page_token(page_token)
    return query.where(
        or_(model.created_at < created_at, and_(model.created_at == created_at, model.id < row_id))
    )


def keyset_page_by_bytes(
    session: Session,
    query: Select[Any],
    model: Any,
    page_size: int,
    page_token: str | None,
    *,
    size: Any,
    max_bytes: int,
) -> Page:
    """`keyset_page`, stopped early where the rows' `size` (an SQL expression: their stored bodies' length,
    computed in the database) adds up past `max_bytes`. The sizes are read first in one narrow query, then
    only the rows that fit are loaded, so a page of large rows never holds more than about `max_bytes` in
    memory. A page holds at least one row (however large), so paging always moves on."""
    narrow = _after(query, model, page_token).with_only_columns(model.id, model.created_at, size)
    marks = session.execute(
        narrow.order_by(model.created_at.desc(), model.id.desc()).limit(page_size + 1)
    ).all()
    taken: list[tuple[str, datetime]] = []
    total = 0
    for row_id, created_at, row_size in marks[:page_size]:
        total += int(row_size or 0)
        if taken and total > max_bytes:
            break
        taken.append((row_id, created_at))
    more = len(marks) > len(taken)
    token = encode_page_token(taken[-1][1], taken[-1][0]) if more and taken else None
    ids = [row_id for row_id, _ in taken]
    loaded = {row.id: row for row in session.scalars(select(model).where(model.id.in_(ids)))} if ids else {}
    return Page(items=[loaded[i] for i in ids if i in loaded], next_page_token=token)


def keyset_page(
    session: Session,
    query: Select[Any],
    model: Any,
    page_size: int,
    page_token: str | None,
    *,
    scalars: bool = True,
) -> Page:
    """Newest first; the token is the (created_at, id) of the last row shown (keyset pagination).
    `scalars`: the items are the query's first column (ORM objects); False: whole rows (a select of
    columns, which must hold `created_at` and `id`)."""
    query = _after(query, model, page_token).order_by(model.created_at.desc(), model.id.desc())
    query = query.limit(page_size + 1)
    rows = list(session.scalars(query) if scalars else session.execute(query))
    token = (
        encode_page_token(rows[page_size - 1].created_at, rows[page_size - 1].id)
        if len(rows) > page_size
        else None
    )
    return Page(items=rows[:page_size], next_page_token=token)
