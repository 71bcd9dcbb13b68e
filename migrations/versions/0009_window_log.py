"""window_log: a single daemon appends its changed windows instead of upserting them

At 1M group-partitions and 20,000 changed windows a second, the keyed upsert of `windows` cost
Postgres 0.64 of a core and 39 MB/s of WAL, most of it whole pages after each checkpoint; a
table without a key took the same rows for 0.16 of a core and 12.5 MB/s (bench_store
--sustained 60, 2026-11-28). The log is partitioned by generation: the persister copies every
window into a new generation now and then and drops the older ones once that copy is complete
(lagd.state.store). The rows `windows` holds stay valid until the first generation is
complete, which empties it; workers (lagd.scale) keep writing `windows` and fold the log into
it when they start.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28 16:30:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("CREATE SEQUENCE window_log_seq")
    op.execute(
        "CREATE TABLE window_log ("
        "generation bigint NOT NULL, "
        "seq bigint NOT NULL DEFAULT nextval('window_log_seq'), "
        "cluster text NOT NULL, group_name text NOT NULL, topic text NOT NULL, partition integer NOT NULL, "
        "entries bytea NOT NULL, group_hash integer"
        ") PARTITION BY LIST (generation)"
    )
    op.execute(
        "CREATE TABLE window_generations ("
        "generation bigint PRIMARY KEY, started_at bigint NOT NULL, completed_at bigint)"
    )
    # Every stored window, wherever it is kept, for operators and for workers folding the log
    # into `windows` (lagd.state.store.Store.fold_log): the newest row of each key in the log
    # from the last complete generation on, over `windows`; an empty row removes its window.
    op.execute(
        "CREATE VIEW current_windows AS "
        "SELECT cluster, group_name, topic, partition, entries, group_hash FROM ("
        "SELECT DISTINCT ON (cluster, group_name, topic, partition) * FROM ("
        "SELECT -1::bigint AS seq, cluster, group_name, topic, partition, entries, group_hash FROM windows "
        "UNION ALL "
        "SELECT seq, cluster, group_name, topic, partition, entries, group_hash FROM window_log WHERE generation >= "
        "(SELECT coalesce(max(generation), 0) FROM window_generations WHERE completed_at IS NOT NULL)"
        ") stored ORDER BY cluster, group_name, topic, partition, seq DESC"
        ") newest WHERE length(entries) > 0"
    )


def downgrade() -> None:
    # what the log holds goes back into `windows` first, so a downgrade loses no window
    op.execute("CREATE TEMP TABLE folded AS SELECT * FROM current_windows")
    op.execute("TRUNCATE windows")
    op.execute("INSERT INTO windows (cluster, group_name, topic, partition, entries, group_hash) SELECT * FROM folded")
    op.execute("DROP VIEW current_windows")
    op.execute("DROP TABLE window_log")
    op.execute("DROP TABLE window_generations")
    op.execute("DROP SEQUENCE window_log_seq")
