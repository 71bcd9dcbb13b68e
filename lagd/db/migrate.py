"""Run Alembic migrations from code (`lagd db upgrade`), wherever lagd is installed."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from lagd.config import sync_database_url


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


def upgrade(database_url: str, revision: str = "head") -> None:
    """Migrate the database to `revision` (idempotent: at head it does nothing)."""
    command.upgrade(alembic_config(database_url), revision)
