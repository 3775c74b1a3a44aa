"""Schema creation and migration for the PostgreSQL backend.

Several processes may open one database at the same moment: the whole check-and-
migrate step runs in one transaction holding a per-schema advisory transaction
lock (the only advisory lock besides the holder locks of
`persistence.postgres._holders`, a liveness hint), so each numbered migration is
applied exactly once and DDL never races. A database already at the latest
version is recognised without taking the lock.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from .._migrations import check_version, latest_version, pending_migrations
from ._driver import PgDatabase

__all__ = ["DIALECT", "ensure_schema"]

log = logging.getLogger("session_actors.pg_schema")

DIALECT = "postgres"


def _current_version(cur: Any, queries: Mapping[str, str]) -> int:
    cur.execute(queries["schema_version_exists"])
    if not cur.fetchone()["present"]:
        return 0
    cur.execute(queries["current_version"])
    return int(cur.fetchone()["version"])


def ensure_schema(db: PgDatabase, queries: Mapping[str, str], *, migrate: bool = True) -> int:
    """Bring the schema (of the connection's ``search_path``) up to date.

    Returns the schema version. Raises `SchemaVersionError` when the database is
    newer than this code, or older and ``migrate`` is False (nothing is changed).
    """
    latest = latest_version(DIALECT)

    def peek(cur: Any) -> int:
        return _current_version(cur, queries)

    current = db.run("read schema version", peek, readonly=True)
    if not check_version(DIALECT, current, migrate=migrate):
        return current

    def upgrade(cur: Any) -> int:
        cur.execute(queries["migration_lock"])
        cur.execute(queries["create_schema_version"])
        found = _current_version(cur, queries)
        for migration in pending_migrations(DIALECT, found):
            log.info("applying PostgreSQL migration %04d_%s", migration.version, migration.name)
            cur.execute(migration.sql)
            cur.execute(queries["record_version"], {"version": migration.version})
        return latest

    return db.run("migrate schema", upgrade)
