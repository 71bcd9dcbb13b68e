"""group_pauses: each group's history of pauses, for its STOP limit (issue 53)

A group's silences it came back from on its own (deploys, rebalances), kept so that a restart
of lagd judges its next silence against them (lagd.state.pauses): one row per group, the
history as one array [since, end1, length1, ...] in ms, rewritten whole when it changes.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 15:10:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        "CREATE TABLE group_pauses ("
        "cluster text NOT NULL, group_name text NOT NULL, history bigint[] NOT NULL, group_hash integer, "
        "PRIMARY KEY (cluster, group_name))"
    )


def downgrade() -> None:
    op.execute("DROP TABLE group_pauses")
