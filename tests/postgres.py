"""Reading a test database the way an operator would: plain SQL over psycopg2, apart from lagd's own connections."""

from __future__ import annotations

from typing import Any

import psycopg2  # type: ignore[import-untyped]


def query(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """The rows `sql` returns (none for a statement without any), committed."""
    conn = psycopg2.connect(url)
    try:
        with conn, conn.cursor() as cur:
            cur.execute(sql, args or None)  # no arguments: a literal % stays as it is
            return list(cur.fetchall()) if cur.description else []
    finally:
        conn.close()
