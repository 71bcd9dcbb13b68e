"""group_hash: the Kafka hash of each group's name beside its windows, members and tombstone

A worker (lagd.scale) restores the groups of the offsets partitions it is assigned. Postgres
cannot compute Kafka's placement of a group name (Java's String.hashCode), so every row of the
cluster was read and filtered in Python; with the hash stored, Postgres selects the rows
(`group_hash % partitions`). Rows written before this migration keep a null hash until lagd
rewrites them (every window at its next commit); a worker still reads and filters those.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-26 05:20:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

TABLES = ("windows", "group_members", "group_tombstones")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("group_hash", sa.Integer(), nullable=True))


def downgrade() -> None:
    for table in TABLES:
        op.drop_column(table, "group_hash")
