"""Run Alembic migrations from code (`lagd db upgrade`), wherever lagd is installed."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from lagd.core.config import sync_database_url


def migrations_dir() -> Path:
    """The migrations folder: inside the installed package, else the source tree's."""
    packaged = Path(__file__).resolve().parent.parent / "migrations"
    if (packaged / "env.py").exists():
        return packaged
    return Path(__file__).resolve().parents[2] / "migrations"


def alembic_config(database_url: str) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(migrations_dir()))
    cfg.set_main_option("sqlalchemy.url", sync_database_url(database_url).replace("%", "%%"))
    return cfg


def upgrade(database_url: str, revision: str = "head") -> tuple[str | None, str | None]:
    """Migrate the database to `revision` (idempotent: at head it does nothing); the schema's
    revision before and after (None: no schema yet), for `migration_summary`."""
    before = current_revision(database_url)
    command.upgrade(alembic_config(database_url), revision)
    return before, current_revision(database_url)


def current_revision(database_url: str) -> str | None:
    """The revision the database's schema is at (alembic_version); None before the first migration."""
    from alembic.runtime.migration import MigrationContext
    from sqlalchemy import create_engine

    engine = create_engine(sync_database_url(database_url))
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


def migration_summary(before: str | None, after: str | None) -> str:
    """What a migration did, in words: created, migrated from one revision to another, or nothing."""
    if before == after:
        return f"database schema up to date (revision {after})"
    if before is None:
        return f"database schema created (revision {after})"
    return f"database schema migrated from revision {before} to {after}"
