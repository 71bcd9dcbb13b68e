"""log_end.record: that a partition's oldest log-end sample is a record's timestamp (issue 53)

Where lag in seconds was only a bound, lagd reads the first unconsumed record and keeps its
timestamp as the partition's oldest sample (lagd.ingest.record_ts). The sample was stored
already; this keeps the mark that it is a record's, [committed, offset, ts, create time 0/1],
so that after a restart the figure is exact from the first answer rather than after the
sampler reads the record again. NULL: no such mark (and in rows of earlier versions).

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 19:00:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE log_end ADD COLUMN record bigint[]")


def downgrade() -> None:
    op.execute("ALTER TABLE log_end DROP COLUMN record")
