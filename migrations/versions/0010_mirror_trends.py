"""mirror_trends: records produced against records replicated per bucket, per mirror and topic

Written by `lagd jobs mirror-trends` (lagd.jobs.mirror_trends), read at
GET /lagd/v1/mirrors/{mirror}/trends.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 15:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "mirror_trends",
        sa.Column("mirror", sa.Text(), primary_key=True),
        sa.Column("topic", sa.Text(), primary_key=True),
        sa.Column("step", sa.Integer(), primary_key=True),
        sa.Column("bucket", sa.BigInteger(), primary_key=True),
        sa.Column("target_topic", sa.Text(), nullable=False),
        sa.Column("produced", sa.BigInteger(), nullable=False),
        sa.Column("replicated", sa.BigInteger(), nullable=True),
        sa.Column("completeness", sa.Float(), nullable=True),
        sa.Column("completeness_cumulative", sa.Float(), nullable=True),
        sa.Column("backlog", sa.BigInteger(), nullable=True),
        sa.Column("delay_seconds", sa.Float(), nullable=True),
        sa.Column("delay_beyond_history", sa.Boolean(), nullable=False, server_default="false"),
    )


def downgrade() -> None:
    op.drop_table("mirror_trends")
