"""windows: each window as one bytea in the flat layout instead of five bigint arrays

A write is then one value per row, which COPY takes without encoding an array element by
element (the persister's largest cost at high commit rates). Existing rows are converted in
SQL; downgrade converts back.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 21:40:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

NO_LAG = -(2**63)  # a null lag in the flat layout (lagd.state.windows.NO_LAG)


def upgrade() -> None:
    op.add_column("windows", sa.Column("entries", sa.LargeBinary(), nullable=True))
    op.execute(
        f"""
        UPDATE windows SET entries = coalesce((
            SELECT string_agg(
                int8send(u.o) || int8send(u.r) || int8send(u.t) || int8send(u.b) || int8send(coalesce(u.l, {NO_LAG})),
                ''::bytea ORDER BY u.i)
            FROM unnest(offsets, orders, timestamps, observed, lags) WITH ORDINALITY AS u(o, r, t, b, l, i)
        ), ''::bytea)
        """
    )
    op.alter_column("windows", "entries", nullable=False)
    for name in ("offsets", "orders", "timestamps", "observed", "lags"):
        op.drop_column("windows", name)
    # A window row is rewritten at every flush that saw a commit for it: room on each page lets
    # Postgres update it in place (HOT, no index entry to add), the bulk of a write's cost.
    op.execute("ALTER TABLE windows SET (fillfactor = 50)")


def downgrade() -> None:
    op.execute("ALTER TABLE windows RESET (fillfactor)")
    for name in ("offsets", "orders", "timestamps", "observed", "lags"):
        op.add_column("windows", sa.Column(name, postgresql.ARRAY(sa.BigInteger()), nullable=True))
    # field f of entry i is the big-endian int64 at byte 40*i + 8*f
    field = "('x' || encode(substring(entries FROM 40 * i + {f} * 8 + 1 FOR 8), 'hex'))::bit(64)::bigint"
    cols = ", ".join(
        f"array(SELECT {expr} FROM generate_series(0, length(entries) / 40 - 1) AS i ORDER BY i)"
        for expr in (
            field.format(f=0),
            field.format(f=1),
            field.format(f=2),
            field.format(f=3),
            f"nullif({field.format(f=4)}, {NO_LAG})",
        )
    )
    op.execute(f"UPDATE windows SET (offsets, orders, timestamps, observed, lags) = ({cols})")
    for name in ("offsets", "orders", "timestamps", "observed", "lags"):
        op.alter_column("windows", name, nullable=False)
    op.drop_column("windows", "entries")
