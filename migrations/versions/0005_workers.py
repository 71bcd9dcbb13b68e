"""workers: offsets-partition owners and the shared current status of every group

Workers (lagd.scale) publish which offsets partitions they own, so any instance can find a
group's owner, and the status of the groups they judge, so one notifier groups incidents
across workers.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-24 00:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "offsets_owners",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("partition", sa.Integer(), nullable=False),
        sa.Column("worker", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("partitions", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "partition", name=op.f("pk_offsets_owners")),
    )
    op.execute("CREATE SEQUENCE group_verdicts_version")
    op.create_table(
        "group_verdicts",
        sa.Column("cluster", sa.Text(), nullable=False),
        sa.Column("group_name", sa.Text(), nullable=False),
        sa.Column("status", sa.Text(), nullable=False),
        sa.Column("at", sa.BigInteger(), nullable=False),
        sa.Column("body", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("worker", sa.Text(), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("cluster", "group_name", name=op.f("pk_group_verdicts")),
    )
    op.create_index("ix_group_verdicts_version", "group_verdicts", ["version"])


def downgrade() -> None:
    op.drop_index("ix_group_verdicts_version", table_name="group_verdicts")
    op.drop_table("group_verdicts")
    op.execute("DROP SEQUENCE group_verdicts_version")
    op.drop_table("offsets_owners")
