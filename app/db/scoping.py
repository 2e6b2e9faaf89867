"""What every tenant-facing query shares: `owned(model, tenant_id)`, the one place tenant scoping happens
(another tenant's id is simply not found), and keyset pages with opaque page tokens."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from sqlalchemy import Select, and_, or_, select
from sqlalchemy.orm import Session

from app.db.models import Audit, UploadedDataset

Owned = TypeVar("Owned", Audit, UploadedDataset)


class InvalidPageToken(ValueError):
    """A page token that this service did not issue."""


def owned(model: type[Owned], tenant_id: str) -> Select[tuple[Owned]]:
    """THE tenant filter: every tenant-facing query starts here."""
    return select(model).where(model.tenant_id == tenant_id)


@dataclass(frozen=True)
class Page:
    items: Sequence[Any]
    next_page_token: str | None


def encode_page_token(created_at: datetime, row_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), row_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


_MAX_TOKEN_CHARS = 256  # an issued token is ~100 characters


def decode_page_token(token: str) -> tuple[datetime, str]:
    """(created_at, id) from a token this service issued; InvalidPageToken for anything else (too long,
    not base64 JSON of [aware ISO timestamp, id string], or nested past the JSON parser's depth)."""
    problem = "page_token is not a token returned by this service"
    if len(token) > _MAX_TOKEN_CHARS:
        raise InvalidPageToken(problem)
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        created_at, row_id = json.loads(raw)
        when = datetime.fromisoformat(created_at)
    except (binascii.Error, ValueError, TypeError, RecursionError) as exc:
        raise InvalidPageToken(problem) from exc
    if when.tzinfo is None or not isinstance(row_id, str) or len(row_id) > 64:
        raise InvalidPageToken(problem)
    return when, row_id


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
    taken, total = [], 0
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
    session: Session, query: Select[Any], model: Any, page_size: int, page_token: str | None
) -> Page:
    """Newest first; the token is the (created_at, id) of the last row shown (keyset pagination)."""
    query = _after(query, model, page_token)
    rows = list(
        session.scalars(query.order_by(model.created_at.desc(), model.id.desc()).limit(page_size + 1))
    )
    token = (
        encode_page_token(rows[page_size - 1].created_at, rows[page_size - 1].id)
        if len(rows) > page_size
        else None
    )
    return Page(items=rows[:page_size], next_page_token=token)
