"""MLflow sinks (tenant-facing rows) and the claim on a sweep's parent run. Their deliveries are rows of
the webhook outbox (app/db/webhooks.py) with `sink_id` set."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.db.models import MlflowSink, MlflowSweepRun, WebhookDelivery, utcnow
from app.db.scoping import Page, keyset_page, owned


def add_sink(session: Session, **fields: Any) -> MlflowSink:
    row = MlflowSink(**fields)
    session.add(row)
    session.flush()
    return row


def get_sink(session: Session, *, tenant_id: str, sink_id: str) -> MlflowSink | None:
    return session.scalar(owned(MlflowSink, tenant_id).where(MlflowSink.id == sink_id))


def list_sinks(
    session: Session, *, tenant_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    return keyset_page(session, owned(MlflowSink, tenant_id), MlflowSink, page_size, page_token)


def delete_sink(session: Session, *, tenant_id: str, sink_id: str) -> bool:
    result = session.execute(
        delete(MlflowSink).where(MlflowSink.tenant_id == tenant_id, MlflowSink.id == sink_id)
    )
    return result.rowcount == 1  # type: ignore[attr-defined]


def sinks_of(session: Session, *, tenant_id: str) -> list[MlflowSink]:
    return list(session.scalars(select(MlflowSink).where(MlflowSink.tenant_id == tenant_id)))


def list_deliveries(
    session: Session, *, tenant_id: str, sink_id: str, page_size: int = 50, page_token: str | None = None
) -> Page:
    query = owned(WebhookDelivery, tenant_id).where(WebhookDelivery.sink_id == sink_id)
    return keyset_page(session, query, WebhookDelivery, page_size, page_token)


# --- a sweep's parent run -----------------------------------------------------------------------------


def sweep_run(session: Session, *, sink_id: str, sweep_id: str) -> MlflowSweepRun | None:
    return session.get(MlflowSweepRun, (sink_id, sweep_id), populate_existing=True)


def claim_sweep_run(session: Session, *, sink_id: str, sweep_id: str, stale_before: datetime) -> bool:
    """True for the one caller that now makes the sweep's parent run (committed at once): the first to
    insert the row, or the one that takes over a claim older than `stale_before` that never got a run."""
    session.add(MlflowSweepRun(sink_id=sink_id, sweep_id=sweep_id))
    try:
        session.commit()
        return True
    except IntegrityError:
        session.rollback()
    result = session.execute(
        update(MlflowSweepRun)
        .where(
            MlflowSweepRun.sink_id == sink_id,
            MlflowSweepRun.sweep_id == sweep_id,
            MlflowSweepRun.run_id.is_(None),
            MlflowSweepRun.claimed_at < stale_before,
        )
        .values(claimed_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    session.commit()
    return result.rowcount == 1  # type: ignore[attr-defined]


def set_sweep_run(session: Session, *, sink_id: str, sweep_id: str, run_id: str) -> None:
    session.execute(
        update(MlflowSweepRun)
        .where(MlflowSweepRun.sink_id == sink_id, MlflowSweepRun.sweep_id == sweep_id)
        .values(run_id=run_id)
        .execution_options(synchronize_session=False)
    )
    session.commit()
