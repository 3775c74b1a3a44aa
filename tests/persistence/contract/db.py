"""Direct database access for contract tests, per backend (never the store's internals).

Tests use it to prove "nothing was written" (a full snapshot of every table)
and to plant states the public API refuses to create (a newer schema version).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

TABLES = ("sessions", "messages", "leases", "cooldowns", "compactions", "schema_version")


def execute(backend: str, url: str, sql: str) -> list[tuple[Any, ...]]:
    """Run one parameterless statement in its own committed transaction."""
    if backend == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None)
        try:
            cur = conn.execute(sql)
            return [tuple(r) for r in cur.fetchall()] if cur.description else []
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
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
