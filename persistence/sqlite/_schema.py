"""Bring an SQLite file to the current schema: WAL mode, then numbered migrations.

A file already at the current version is recognised by a plain read, so opening
a store never waits for the write lock unless there is something to migrate.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Callable, Mapping

from protocol import ConfigurationError

from .._migrations import check_version, pending_migrations
from ._driver import BusyRetry

__all__ = ["DIALECT", "check_schema", "prepare_database"]

logger = logging.getLogger("session_actors.sqlite_schema")

DIALECT = "sqlite"


def prepare_database(
    conn: sqlite3.Connection,
    q: Mapping[str, str],
    *,
    path: str,
    retry: BusyRetry,
    clock: Callable[[], float],
    migrate: bool = True,
) -> None:
    """Check the schema version, then (``migrate``) WAL mode and pending migrations in
    one ``BEGIN IMMEDIATE`` transaction, so processes opening a new file at once
    migrate it exactly once.

    Raises: `SchemaVersionError` for a newer schema, or an older one when
    ``migrate`` is False (nothing is changed then); `ConfigurationError` when the
    file is not a usable database; `StoreBusyError` past the patience budget.
    """
    try:
        pending = check_schema(conn, q, retry=retry, migrate=migrate)
        retry.run(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
        if pending:
            retry.run(lambda: _migrate(conn, q, path, clock))
    except sqlite3.Error as exc:  # not a database, unreadable, ...: a setup problem
        raise ConfigurationError(f"cannot open SQLite database {path!r}: {exc}") from exc


def check_schema(conn: sqlite3.Connection, q: Mapping[str, str], *, retry: BusyRetry, migrate: bool) -> bool:
    """Read the schema version (a read, never the write lock); True when migrations
    are pending. Raises `SchemaVersionError` as `check_version` does."""

    def read() -> int:
        if not conn.execute(q["schema_version_exists"]).fetchone()["present"]:
            return 0
        return int(conn.execute(q["current_version"]).fetchone()["version"])

    return bool(check_version(DIALECT, retry.run(read), migrate=migrate))


def _migrate(conn: sqlite3.Connection, q: Mapping[str, str], path: str, clock: Callable[[], float]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(q["create_schema_version"])
        current = conn.execute(q["current_version"]).fetchone()["version"]
        for migration in pending_migrations(DIALECT, current):
            for statement in split_statements(migration.sql):
                conn.execute(statement)
            conn.execute(q["record_version"], {"version": migration.version, "now": clock()})
            logger.info("applied migration %04d_%s to %s", migration.version, migration.name, path)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def split_statements(script: str) -> list[str]:
    """Split a script into complete statements (``executescript`` would COMMIT
    our transaction; ``complete_statement`` keeps triggers whole)."""
    statements, buffer = [], ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    leftover = [ln for ln in buffer.splitlines() if ln.strip() and not ln.strip().startswith("--")]
    if leftover:
        raise ConfigurationError(f"incomplete SQL statement in migration: {leftover[0][:80]!r}")
    return statements
