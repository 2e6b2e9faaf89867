"""schedule_runs.alarms_at: when a scheduled run's audit.violation / audit.leak were decided. They are
decided in fire order, each against the previous run's verdict, once every earlier run has ended; runs
that ended before this revision were decided when their events were written.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedule_runs") as batch:
        batch.add_column(sa.Column("alarms_at", sa.DateTime(timezone=True), nullable=True))
    op.create_index("ix_schedule_runs_alarms", "schedule_runs", ["alarms_at"])
    op.execute(
        "UPDATE schedule_runs SET alarms_at = created_at WHERE audit_id IS NULL"
        " OR audit_id IN (SELECT id FROM audits WHERE events_at IS NOT NULL)"
    )


def downgrade() -> None:
    op.drop_index("ix_schedule_runs_alarms", table_name="schedule_runs")
    with op.batch_alter_table("schedule_runs") as batch:
        batch.drop_column("alarms_at")
