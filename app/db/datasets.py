"""Uploaded datasets, tenant-scoped through `scoping.owned`. A name is unique per tenant up to its version:
`add_dataset` stores the next version of a name, `newest_named` resolves a name to its newest version."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from app.db.models import UploadedDataset
from app.db.scoping import Page, keyset_page, owned


def add_dataset(session: Session, *, tenant_id: str, name: str, **fields: Any) -> UploadedDataset:
    """Store `name`'s next version (1 for a new name). The caller holds the tenant's lock
    (app.db.audits.lock_tenant), so two uploads of one name at once get two versions."""
    newest = newest_named(session, tenant_id=tenant_id, name=name)
    version = 1 if newest is None else newest.version + 1
    row = UploadedDataset(tenant_id=tenant_id, name=name, version=version, **fields)
    session.add(row)
    session.flush()
    return row


def get_dataset(session: Session, *, tenant_id: str, dataset_id: str) -> UploadedDataset | None:
    return session.scalar(owned(UploadedDataset, tenant_id).where(UploadedDataset.id == dataset_id))


def newest_named(session: Session, *, tenant_id: str, name: str) -> UploadedDataset | None:
    """The newest version of the tenant's dataset called `name` (None when it has none)."""
    return session.scalar(
        owned(UploadedDataset, tenant_id)
        .where(UploadedDataset.name == name)
        .order_by(UploadedDataset.version.desc())
        .limit(1)
    )


def names_of(session: Session, *, tenant_id: str, dataset_ids: list[str]) -> dict[str, tuple[str, int]]:
    """{id: (name, version)} of those of `dataset_ids` that are the tenant's uploads."""
    if not dataset_ids:
        return {}
    rows = session.execute(
        select(UploadedDataset.id, UploadedDataset.name, UploadedDataset.version).where(
            UploadedDataset.tenant_id == tenant_id, UploadedDataset.id.in_(dataset_ids)
        )
    )
    return {row.id: (row.name, row.version) for row in rows}


def previous_version(session: Session, row: UploadedDataset) -> UploadedDataset | None:
    """The version of `row`'s name just before it, if it is still stored."""
    return session.scalar(
        owned(UploadedDataset, row.tenant_id).where(
            UploadedDataset.name == row.name, UploadedDataset.version == row.version - 1
        )
    )


def list_datasets(
    session: Session, *, tenant_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    return keyset_page(session, owned(UploadedDataset, tenant_id), UploadedDataset, page_size, page_token)


def delete_dataset(session: Session, *, tenant_id: str, dataset_id: str) -> bool:
    result = session.execute(
        delete(UploadedDataset).where(
            UploadedDataset.tenant_id == tenant_id, UploadedDataset.id == dataset_id
        )
    )
    return result.rowcount == 1  # type: ignore[attr-defined]
