"""datasets.version: a dataset name is unique per tenant up to its version (uploading a name again stores the
next version; the name resolves to the newest). Existing uploads that share a name are numbered in upload
order.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("datasets") as batch:
        batch.add_column(sa.Column("version", sa.Integer(), nullable=False, server_default="1"))
    op.execute(
        "UPDATE datasets SET version = (SELECT COUNT(*) FROM datasets AS older"
        " WHERE older.tenant_id = datasets.tenant_id AND older.name = datasets.name"
        " AND (older.created_at < datasets.created_at"
        " OR (older.created_at = datasets.created_at AND older.id <= datasets.id)))"
    )
    op.create_index(
        "ux_datasets_tenant_name_version", "datasets", ["tenant_id", "name", "version"], unique=True
    )


def downgrade() -> None:
    op.drop_index("ux_datasets_tenant_name_version", table_name="datasets")
    with op.batch_alter_table("datasets") as batch:
        batch.drop_column("version")
