"""Tables: tenants, their API keys, their audits (the system of record) and their uploaded datasets."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, DateTime, ForeignKey, Index, Integer, LargeBinary, String, Text, TypeDecorator
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Re-exported: the states live in app.db.constants (no SQLAlchemy) for the API models and the client.
from app.db.constants import TERMINAL_STATES as TERMINAL_STATES
from app.db.constants import AuditState as AuditState


def utcnow() -> datetime:
    return datetime.now(UTC)


def new_id() -> str:
    return uuid.uuid4().hex


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC datetimes on both dialects (SQLite stores naive values; they are read back as UTC)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Any) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    pass


class Tenant(Base):
    __tablename__ = "tenants"

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ApiKey(Base):
    """`ica_<id>_<secret>`: looked up by `id`, verified against scrypt(secret, salt)."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), index=True)
    salt: Mapped[bytes] = mapped_column(LargeBinary(32))
    secret_hash: Mapped[bytes] = mapped_column(LargeBinary(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class Audit(Base):
    __tablename__ = "audits"
    __table_args__ = (
        Index("ix_audits_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_audits_state_heartbeat", "state", "heartbeat_at"),
        Index("ix_audits_events", "events_at", "finished_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(64))
    state: Mapped[str] = mapped_column(String(16))  # written only by app/db/audits.py
    request: Mapped[dict[str, Any]] = mapped_column(JSON)
    progress_stage: Mapped[str] = mapped_column(String(200), default="queued")
    progress_fraction: Mapped[float] = mapped_column(default=0.0)
    progress_eta_seconds: Mapped[float | None] = mapped_column(default=None)
    progress_message: Mapped[str] = mapped_column(Text, default="")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSON, default=None)
    attempt: Mapped[int] = mapped_column(Integer, default=0)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    enqueued_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # the queue incarnation that holds its message (a broker restarted empty, or a new inline process,
    # has another): the sweep re-enqueues a PENDING audit only when this differs from the current one
    queue_epoch: Mapped[str | None] = mapped_column(String(64), default=None)
    # the X-Request-ID of the submitting request: the audit's log lines and webhook deliveries carry it
    request_id: Mapped[str | None] = mapped_column(String(128), default=None)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # when its terminal-state webhook events were written (app/integrations/events.py); NULL = not yet
    events_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)
    # seconds it waited for a model to load in its worker (NULL: none loaded for it); plans count it apart
    model_load_seconds: Mapped[float | None] = mapped_column(default=None)
    # a chain of next steps (the request's `until_answer`, app/jobs/follow_up.py): the audit this one is the
    # next step of, and the audit that took this one's next step (written with this one's outcome)
    follows: Mapped[str | None] = mapped_column(String(32), default=None)
    followed_by: Mapped[str | None] = mapped_column(String(32), default=None)


class UploadedDataset(Base):
    """The uploaded file as sent (re-parsed by app.datasets.validate when an audit loads it). A name is unique
    per tenant up to its `version`: uploading a name again stores version n + 1, and the name resolves to
    the newest."""

    __tablename__ = "datasets"
    __table_args__ = (
        Index("ix_datasets_tenant_created", "tenant_id", "created_at", "id"),
        Index("ux_datasets_tenant_name_version", "tenant_id", "name", "version", unique=True),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    version: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    format: Mapped[str] = mapped_column(String(8))
    task: Mapped[str] = mapped_column(String(32))
    labels: Mapped[list[str]] = mapped_column(JSON)
    n_train: Mapped[int] = mapped_column(Integer)
    n_test: Mapped[int] = mapped_column(Integer)
    size_bytes: Mapped[int] = mapped_column(Integer)
    content: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


# --- integrations: idempotency keys, labels, webhooks, sweeps -------------------------------------------


class IdempotencyKey(Base):
    """One `Idempotency-Key` per tenant (the primary key is the unique constraint that makes concurrent
    duplicates create one resource): the fingerprint of the first body and the answer it got."""

    __tablename__ = "idempotency_keys"
    __table_args__ = (Index("ix_idempotency_keys_expires", "expires_at"),)

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    operation: Mapped[str] = mapped_column(String(64))
    fingerprint: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int] = mapped_column(Integer)
    resource_id: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime())


class AuditLabel(Base):
    """A copy of an audit's `labels` as rows, so `GET /v1/audits?label=k=v` is an indexed lookup."""

    __tablename__ = "audit_labels"
    __table_args__ = (Index("ix_audit_labels_key_value", "key", "value"),)

    audit_id: Mapped[str] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(255))


class WebhookEndpoint(Base):
    """A tenant's webhook target; `secret` (`whsec_…`) signs every delivery (Standard Webhooks)."""

    __tablename__ = "webhook_endpoints"
    __table_args__ = (Index("ix_webhook_endpoints_tenant_created", "tenant_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(String(2000))
    secret: Mapped[str] = mapped_column(String(100))
    events: Mapped[list[str]] = mapped_column(JSON)
    description: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class NotifySecret(Base):
    """The tenant's secret for deliveries to a per-request `notify` URL."""

    __tablename__ = "notify_secrets"

    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"), primary_key=True)
    secret: Mapped[str] = mapped_column(String(100))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class MlflowSink(Base):
    """A tenant's MLflow tracking server: every finished audit becomes a run in `experiment`; `token`
    (optional, never shown back) is sent as `Authorization: Bearer`."""

    __tablename__ = "mlflow_sinks"
    __table_args__ = (Index("ix_mlflow_sinks_tenant_created", "tenant_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    tracking_uri: Mapped[str] = mapped_column(String(2000))
    experiment: Mapped[str] = mapped_column(String(500))
    token: Mapped[str | None] = mapped_column(String(2000), default=None)
    description: Mapped[str] = mapped_column(String(200), default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class MlflowSweepRun(Base):
    """The parent run of a sweep in a sink: claimed by inserting this row before the run is created, so
    concurrent deliveries of its children create one parent (`run_id` is NULL while it is made)."""

    __tablename__ = "mlflow_sweep_runs"

    sink_id: Mapped[str] = mapped_column(ForeignKey("mlflow_sinks.id", ondelete="CASCADE"), primary_key=True)
    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True)
    run_id: Mapped[str | None] = mapped_column(String(64), default=None)
    claimed_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class WebhookDelivery(Base):
    """The outbox and the delivery log: one event for one target. `id` is the `webhook-id` (the same on
    every attempt, so a receiver can drop a repeat); `next_attempt_at` is both the backoff and the lease of
    the attempt in flight."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (
        Index("ix_webhook_deliveries_due", "state", "next_attempt_at"),
        Index("ix_webhook_deliveries_endpoint_created", "endpoint_id", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    endpoint_id: Mapped[str | None] = mapped_column(
        ForeignKey("webhook_endpoints.id", ondelete="CASCADE"), default=None
    )
    # set for a delivery to an MLflow sink (app/integrations/mlflow.py) instead of a webhook
    sink_id: Mapped[str | None] = mapped_column(
        ForeignKey("mlflow_sinks.id", ondelete="CASCADE"), default=None, index=True
    )
    url: Mapped[str] = mapped_column(String(2000))
    event_type: Mapped[str] = mapped_column(String(64))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), default="PENDING")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    last_status: Mapped[int | None] = mapped_column(Integer, default=None)
    last_error: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class Sweep(Base):
    """A grid of audits over one base request; its state and progress are its children's."""

    __tablename__ = "sweeps"
    __table_args__ = (Index("ix_sweeps_tenant_created", "tenant_id", "created_at", "id"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    base: Mapped[dict[str, Any]] = mapped_column(JSON)
    grid: Mapped[dict[str, Any]] = mapped_column(JSON)
    seeds: Mapped[int] = mapped_column(Integer)
    labels: Mapped[dict[str, str]] = mapped_column(JSON)
    notify: Mapped[str | None] = mapped_column(String(2000), default=None)
    cancel_requested: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    completed_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class SweepChild(Base):
    """Point `position` of a sweep: the grid values and seed it set, and the audit that runs it."""

    __tablename__ = "sweep_children"

    sweep_id: Mapped[str] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    audit_id: Mapped[str] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"), index=True)
    point: Mapped[dict[str, Any]] = mapped_column(JSON)
    seed: Mapped[int] = mapped_column(Integer)


class Schedule(Base):
    """An audit request or a sweep re-run at every `cron` time (UTC), or every `interval_seconds`."""

    __tablename__ = "schedules"
    __table_args__ = (
        Index("ix_schedules_tenant_created", "tenant_id", "created_at", "id"),
        Index("ix_schedules_next_fire", "next_fire_at"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True, default=new_id)
    tenant_id: Mapped[str] = mapped_column(ForeignKey("tenants.id", ondelete="CASCADE"))
    target: Mapped[str] = mapped_column(String(8))  # "audit" or "sweep"
    body: Mapped[dict[str, Any]] = mapped_column(JSON)
    cron: Mapped[str | None] = mapped_column(String(200), default=None)
    interval_seconds: Mapped[float | None] = mapped_column(default=None)
    next_fire_at: Mapped[datetime] = mapped_column(UTCDateTime())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)


class ScheduleRun(Base):
    """One firing: the unique (schedule_id, fire_time) that lets only one API process fire it."""

    __tablename__ = "schedule_runs"
    __table_args__ = (Index("ix_schedule_runs_alarms", "alarms_at"),)  # the dispatcher's idle check

    schedule_id: Mapped[str] = mapped_column(ForeignKey("schedules.id", ondelete="CASCADE"), primary_key=True)
    fire_time: Mapped[datetime] = mapped_column(UTCDateTime(), primary_key=True)
    audit_id: Mapped[str | None] = mapped_column(ForeignKey("audits.id", ondelete="SET NULL"), default=None)
    sweep_id: Mapped[str | None] = mapped_column(ForeignKey("sweeps.id", ondelete="SET NULL"), default=None)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
    # When its audit.violation / audit.leak were decided: in fire order, against the previous run's verdict.
    alarms_at: Mapped[datetime | None] = mapped_column(UTCDateTime(), default=None)


class AuditResume(Base):
    """A resumed audit (POST /v1/audits/{id}/resume) and the lineage whose stored target responses it
    replays: the first audit of the chain."""

    __tablename__ = "audit_resumes"

    audit_id: Mapped[str] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"), primary_key=True)
    lineage_id: Mapped[str] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"), index=True)
    resumed_from: Mapped[str] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"))


class TargetResponse(Base):
    """One answered call to an audited target, keyed by its lineage and the exact request (the body's
    sha256 and its occurrence in the audit's call sequence), so a resumed audit re-issues only what is
    missing. `answer` is the value read at the endpoint's answer_path, not the whole reply."""

    __tablename__ = "target_responses"

    lineage_id: Mapped[str] = mapped_column(ForeignKey("audits.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(96), primary_key=True)
    answer: Mapped[Any] = mapped_column(JSON, nullable=False)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime(), default=utcnow)
