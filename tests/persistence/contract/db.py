"""Direct database access for contract tests, per backend (never the store's internals).

Tests use it to prove "nothing was written" (a full snapshot of every table)
and to plant states the public API refuses to create (a newer schema version).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

TABLES = ("sessions", "messages", "leases", "cooldowns", "compactions", "message_keys", "turn_keys", "schema_version")


def execute(backend: str, url: str, sql: str) -> list[tuple[Any, ...]]:
    """Run one parameterless statement in its own committed transaction."""
    if backend == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            cur = conn.execute(sql)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []
        finally:
            conn.close()
    with pg_connect(url) as conn:
        cur = conn.execute(sql)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def snapshot(backend: str, url: str) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every table, in a stable order: equal snapshots mean nothing changed."""
    return {t: sorted(execute(backend, url, f"SELECT * FROM {t}"), key=repr) for t in TABLES}


def wait_for(condition: Callable[[], Any], *, timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll ``condition`` until it returns a truthy value; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        time.sleep(interval)


def plant_schema(backend: str, url: str, version: int) -> None:
    """Bring an empty database to schema ``version`` (< the latest) by running the
    shipped migrations 1..version directly: an older deployment, as it was."""
    from persistence._migrations import load_migrations
    from persistence._queries import load_queries

    dialect = "sqlite" if backend == "sqlite" else "postgres"
    migrations, q = load_migrations(dialect)[:version], load_queries(dialect)
    if backend == "sqlite":
        from persistence.sqlite._schema import split_statements

        conn = sqlite3.connect(url, isolation_level=None)
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            for migration in migrations:
                for statement in split_statements(migration.sql):
                    conn.execute(statement)
                conn.execute(q["create_schema_version"])
                conn.execute(q["record_version"], {"version": migration.version, "now": 0})
        finally:
            conn.close()
        return
    with pg_connect(url) as conn:
        for migration in migrations:
            conn.execute(migration.sql)
            conn.execute(q["create_schema_version"])
            conn.execute(q["record_version"], {"version": migration.version})


@contextmanager
def writes_held(backend: str, url: str) -> Iterator[None]:
    """Another connection blocks the store's writes while inside: SQLite's write lock,
    or on PostgreSQL an EXCLUSIVE lock on ``sessions`` (every append locks its
    session row first). The store's writer waits, or retries, until it is left."""
    if backend == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            yield
        finally:
            conn.rollback()
            conn.close()
        return
    with pg_connect(url) as conn:
        with conn.transaction():
            conn.execute("LOCK TABLE sessions IN EXCLUSIVE MODE")
            yield


def pg_connect(url: str) -> Any:
    """An autocommit connection for a store URL (its own options removed; no prepared
    statements, so it works through PgBouncer too)."""
    import psycopg

    from persistence._urls import split_store_options

    return psycopg.connect(split_store_options(url)[0], autocommit=True, prepare_threshold=None)
