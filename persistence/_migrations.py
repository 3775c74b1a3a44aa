"""Numbered schema migrations, shared by every dialect.

Migrations are package data: ``persistence/<dialect>/migrations/NNNN_name.sql``.
The ``schema_version`` table holds one row per applied migration; the schema
version is its highest ``version``. A backend asks `pending_migrations` which
scripts to run (inside its own write transaction, under its own lock) and
records each one; a database newer than the code raises `SchemaVersionError`.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources

from protocol import ConfigurationError, SchemaVersionError

__all__ = ["Migration", "check_version", "latest_version", "load_migrations", "pending_migrations"]

_FILE_NAME = re.compile(r"^(\d{4})_([A-Za-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    """One numbered migration script."""

    version: int
    name: str
    sql: str


@functools.cache
def load_migrations(dialect: str) -> tuple[Migration, ...]:
    """The dialect's migrations in version order; versions must be 1..N without gaps."""
    folder = resources.files("persistence").joinpath(dialect, "migrations")
    if not folder.is_dir():
        raise ConfigurationError(f"no migrations for dialect {dialect!r}")
    found = []
    for entry in folder.iterdir():
        match = _FILE_NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), match.group(2), entry.read_text("utf-8")))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise ConfigurationError(f"{dialect} migrations are not numbered 1..N: {found!r}")
    return tuple(found)


def latest_version(dialect: str) -> int:
    """The schema version this code produces for ``dialect``."""
    return len(load_migrations(dialect))


def pending_migrations(dialect: str, current: int) -> list[Migration]:
    """Migrations to apply to a database at version ``current`` (0 = empty).

    Raises: `SchemaVersionError` when ``current`` is newer than this code knows.
    """
    latest = latest_version(dialect)
    if current > latest:
        raise SchemaVersionError(current, latest)
    return [m for m in load_migrations(dialect) if m.version > current]


def check_version(dialect: str, current: int, *, migrate: bool) -> list[Migration]:
    """The migrations to apply to a database at version ``current``.

    Raises: `SchemaVersionError` when ``current`` is newer than this code, or older
    and ``migrate`` is False (its message names ``session-actors migrate``).
    """
    pending = pending_migrations(dialect, current)
    if pending and not migrate:
        raise SchemaVersionError(current, latest_version(dialect))
    return pending
