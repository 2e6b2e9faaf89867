"""MLflow sinks: a tenant's tracking servers (mlflow_sinks), the parent run of a sweep in each
(mlflow_sweep_runs), and webhook_deliveries.sink_id: a sink's runs go through the deliveries outbox.
audits.model_load_seconds: the seconds an audit waited for its model to load (a plan counts it apart).

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audits") as batch:
        batch.add_column(sa.Column("model_load_seconds", sa.Double(), nullable=True))
    op.create_table(
        "mlflow_sinks",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("tenant_id", sa.String(length=32), nullable=False),
        sa.Column("tracking_uri", sa.String(length=2000), nullable=False),
        sa.Column("experiment", sa.String(length=500), nullable=False),
        sa.Column("token", sa.String(length=2000), nullable=True),
        sa.Column("description", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index(
        "ix_mlflow_sinks_tenant_created", "mlflow_sinks", ["tenant_id", "created_at", "id"], unique=False
    )
    op.create_table(
        "mlflow_sweep_runs",
        sa.Column("sink_id", sa.String(length=32), nullable=False),
        sa.Column("sweep_id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=64), nullable=True),
        sa.Column("claimed_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["sink_id"], ["mlflow_sinks.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["sweep_id"], ["sweeps.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("sink_id", "sweep_id"),
    )
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.add_column(sa.Column("sink_id", sa.String(length=32), nullable=True))
        batch.create_foreign_key(
            "fk_webhook_deliveries_sink_id", "mlflow_sinks", ["sink_id"], ["id"], ondelete="CASCADE"
        )
        batch.create_index("ix_webhook_deliveries_sink_id", ["sink_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("webhook_deliveries") as batch:
        batch.drop_index("ix_webhook_deliveries_sink_id")
        batch.drop_constraint("fk_webhook_deliveries_sink_id", type_="foreignkey")
        batch.drop_column("sink_id")
    op.drop_table("mlflow_sweep_runs")
    op.drop_index("ix_mlflow_sinks_tenant_created", table_name="mlflow_sinks")
    op.drop_table("mlflow_sinks")
    with op.batch_alter_table("audits") as batch:
        batch.drop_column("model_load_seconds")
