"""incident_members: each incident member's stored state in a row of its own

The notifier stored its whole engine state as one JSON document per cluster at every flush.
A broker outage puts every group of a cluster in one incident: at 10,000 groups with 100 bad
partitions each that document is 37 MB, joined, sent and parsed every second while one group
changes. Now `incident_engine_state` keeps the incidents without their members, and each
member is a row here, written when it changes (lagd.notify.incidents.StateRows). State saved
before keeps its members inline and is read as it is; the next save writes them here.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-27 01:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "incident_members",
        sa.Column("cluster", sa.Text(), primary_key=True),
        sa.Column("incident_id", sa.Text(), primary_key=True),
        sa.Column("member", sa.Text(), primary_key=True),
        sa.Column("body", postgresql.JSONB(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("incident_members")
