"""target_responses and audit_resumes: every answered call to an audited target, so a resumed audit
(POST /v1/audits/{id}/resume) re-issues only the calls its lineage lacks

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_resumes",
        sa.Column(
            "audit_id", sa.String(length=32), sa.ForeignKey("audits.id", ondelete="CASCADE"), primary_key=True
        ),
        sa.Column(
            "lineage_id", sa.String(length=32), sa.ForeignKey("audits.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column(
            "resumed_from",
            sa.String(length=32),
            sa.ForeignKey("audits.id", ondelete="CASCADE"),
            nullable=False,
        ),
    )
    op.create_index("ix_audit_resumes_lineage_id", "audit_resumes", ["lineage_id"])
    op.create_table(
        "target_responses",
        sa.Column(
            "lineage_id",
            sa.String(length=32),
            sa.ForeignKey("audits.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("key", sa.String(length=96), primary_key=True),
        sa.Column("answer", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("target_responses")
    op.drop_index("ix_audit_resumes_lineage_id", table_name="audit_resumes")
    op.drop_table("audit_resumes")
