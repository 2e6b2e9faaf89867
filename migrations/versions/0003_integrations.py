"""integrations (issue 12): idempotency keys, audit labels, webhooks (endpoints, notify secrets, the
delivery outbox), sweeps and their children, schedules and their runs; audits.events_at

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _tenant_fk() -> sa.ForeignKeyConstraint:
    return sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE")


def upgrade() -> None:
    with op.batch_alter_table("audits") as batch:
        batch.add_column(sa.Column("events_at", sa.DateTime(timezone=True), nullable=True))
        batch.create_index("ix_audits_events", ["events_at", "finished_at"], unique=False)
    # audits that finished before webhooks existed have no events to send
    op.execute("UPDATE audits SET events_at = finished_at WHERE finished_at IS NOT NULL")

    op.create_table(
        "idempotency_keys",
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=255), nullable=False),
        sa.Column("operation", sa.String(length=64), nullable=False),
        sa.Column("fingerprint", sa.String(length=64), nullable=False),
        sa.Column("status_code", sa.Integer(), nullable=False),
        sa.Column("resource_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        _tenant_fk(),
        sa.PrimaryKeyConstraint("tenant_id", "key"),
    )
    op.create_index("ix_idempotency_keys_expires", "idempotency_keys", ["expires_at"], unique=False)

    op.create_table(
        "audit_labels",
        sa.Column("audit_id", sa.String(length=32), nullable=False),
        sa.Column("key", sa.String(length=63), nullable=False),
        sa.Column("value", sa.String(length=255), nullable=False),
        sa.ForeignKeyConstraint(["audit_id"], ["audits.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("audit_id", "key"),
    )
    op.create_index("ix_audit_labels_key_value", "audit_labels", ["key", "value"], unique=False)

    op.create_table(
        "webhook_endpoints",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("secret", sa.String(length=100), nullable=False),
        sa.Column("events", sa.JSON(), nullable=False),
        sa.Column("description", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _tenant_fk(),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_webhook_endpoints_tenant_created", "webhook_endpoints", ["tenant_id", "created_at", "id"], unique=False
    )

    op.create_table(
        "notify_secrets",
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("secret", sa.String(length=100), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _tenant_fk(),
        sa.PrimaryKeyConstraint("tenant_id"),
    )

    op.create_table(
        "webhook_deliveries",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("endpoint_id", sa.String(length=32), nullable=True),
        sa.Column("url", sa.String(length=2000), nullable=False),
        sa.Column("event_type", sa.String(length=64), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        _tenant_fk(),
        sa.ForeignKeyConstraint(["endpoint_id"], ["webhook_endpoints.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_webhook_deliveries_due", "webhook_deliveries", ["state", "next_attempt_at"], unique=False)
    op.create_index(
        "ix_webhook_deliveries_endpoint_created",
        "webhook_deliveries",
        ["endpoint_id", "created_at", "id"],
        unique=False,
    )

    op.create_table(
        "sweeps",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("base", sa.JSON(), nullable=False),
        sa.Column("grid", sa.JSON(), nullable=False),
        sa.Column("seeds", sa.Integer(), nullable=False),
        sa.Column("labels", sa.JSON(), nullable=False),
        sa.Column("notify", sa.String(length=2000), nullable=True),
        sa.Column("cancel_requested", sa.Boolean(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("completed_at", sa.DateTime(timezone=True), nullable=True),
        _tenant_fk(),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_sweeps_tenant_created", "sweeps", ["tenant_id", "created_at", "id"], unique=False)

    op.create_table(
        "sweep_children",
        sa.Column("sweep_id", sa.String(length=32), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("audit_id", sa.String(length=32), nullable=False),
        sa.Column("point", sa.JSON(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["audit_id"], ["audits.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("sweep_id", "position"),
    )
    op.create_index(op.f("ix_sweep_children_audit_id"), "sweep_children", ["audit_id"], unique=False)

    op.create_table(
        "schedules",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("target", sa.String(length=8), nullable=False),
        sa.Column("body", sa.JSON(), nullable=False),
        sa.Column("cron", sa.String(length=200), nullable=True),
        sa.Column("interval_seconds", sa.Double(), nullable=True),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        _tenant_fk(),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_schedules_next_fire", "schedules", ["next_fire_at"], unique=False)
    op.create_index("ix_schedules_tenant_created", "schedules", ["tenant_id", "created_at", "id"], unique=False)

    op.create_table(
        "schedule_runs",
        sa.Column("schedule_id", sa.String(length=32), nullable=False),
        sa.Column("fire_time", sa.DateTime(timezone=True), nullable=False),
        sa.Column("audit_id", sa.String(length=32), nullable=True),
        sa.Column("sweep_id", sa.String(length=32), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["audit_id"], ["audits.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("schedule_id", "fire_time"),
    )


def downgrade() -> None:
    op.drop_table("schedule_runs")
    op.drop_index("ix_schedules_tenant_created", table_name="schedules")
    op.drop_index("ix_schedules_next_fire", table_name="schedules")
    op.drop_table("schedules")
    op.drop_index(op.f("ix_sweep_children_audit_id"), table_name="sweep_children")
    op.drop_table("sweep_children")
    op.drop_index("ix_sweeps_tenant_created", table_name="sweeps")
    op.drop_table("sweeps")
    op.drop_index("ix_webhook_deliveries_endpoint_created", table_name="webhook_deliveries")
    op.drop_index("ix_webhook_deliveries_due", table_name="webhook_deliveries")
    op.drop_table("webhook_deliveries")
    op.drop_table("notify_secrets")
    op.drop_index("ix_webhook_endpoints_tenant_created", table_name="webhook_endpoints")
    op.drop_table("webhook_endpoints")
    op.drop_index("ix_audit_labels_key_value", table_name="audit_labels")
    op.drop_table("audit_labels")
    op.drop_index("ix_idempotency_keys_expires", table_name="idempotency_keys")
    op.drop_table("idempotency_keys")
    with op.batch_alter_table("audits") as batch:
        batch.drop_index("ix_audits_events")
        batch.drop_column("events_at")
