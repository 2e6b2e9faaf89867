"""audits.follows / audits.followed_by: a chain of next steps taken by the service (`until_answer`). Both
null for existing audits.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("audits") as batch:
        batch.add_column(sa.Column("follows", sa.String(32), nullable=True))
        batch.add_column(sa.Column("followed_by", sa.String(32), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("audits") as batch:
        batch.drop_column("followed_by")
        batch.drop_column("follows")
