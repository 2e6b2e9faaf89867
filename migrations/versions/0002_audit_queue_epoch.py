"""audits.queue_epoch: which incarnation of the queue holds an audit's message

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audits") as batch:
        batch.add_column(sa.Column("queue_epoch", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audits") as batch:
        batch.drop_column("queue_epoch")
