"""Uploaded datasets, tenant-scoped through `scoping.owned`."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete
from sqlalchemy.orm import Session

from app.db.models import UploadedDataset
from app.db.scoping import Page, keyset_page, owned


def add_dataset(session: Session, *, tenant_id: str, **fields: Any) -> UploadedDataset:
    row = UploadedDataset(tenant_id=tenant_id, **fields)
    session.add(row)
    session.flush()
    return row


def get_dataset(session: Session, *, tenant_id: str, dataset_id: str) -> UploadedDataset | None:
    return session.scalar(owned(UploadedDataset, tenant_id).where(UploadedDataset.id == dataset_id))


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
