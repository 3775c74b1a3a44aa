"""How commands open the database: read-only commands never wait for the write
lock, no command but ``migrate`` (and ``simulate``) changes a schema."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from persistence._migrations import latest_version
from tests.cli.helpers import build_lineage_db, run_cli
from tests.persistence.contract.db import plant_schema

pytestmark = pytest.mark.timeout(90)

READ_ONLY_COMMANDS = (["sessions"], ["show", "chat:root", "--archive"], ["lineage", "chat:root"], ["locks"], ["fsck"])
#: Far below the stores' default patience (30 s SQLite, 10 s PostgreSQL): a command
#: that queued for the write lock would take that long, then fail.
QUICK_S = 5.0


@contextmanager
def foreign_write_lock(backend: str, url: str) -> Iterator[None]:
    """Another connection holds the write lock (with an uncommitted write) meanwhile."""
    if backend == "sqlite":
        conn = sqlite3.connect(url, isolation_level=None, timeout=0)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("UPDATE sessions SET source = 'uncommitted' WHERE id = 'chat:idle'")
            yield
        finally:
            conn.execute("ROLLBACK")
            conn.close()
        return
    import psycopg

    with psycopg.connect(url) as conn:  # not autocommit: the locks last until rollback
        conn.execute(
            "LOCK TABLE sessions, messages, leases, cooldowns, compactions, schema_version IN EXCLUSIVE MODE"
        )  # only plain reads may proceed
        conn.execute("UPDATE sessions SET source = 'uncommitted' WHERE id = 'chat:idle'")
        try:
            yield
        finally:
            conn.rollback()


def test_read_only_commands_work_while_another_connection_holds_the_write_lock(capsys, store_url, backend) -> None:
    build_lineage_db(store_url)
    with foreign_write_lock(backend, store_url):
        for argv in READ_ONLY_COMMANDS:
            started = time.monotonic()
            result = run_cli(capsys, "--db", store_url, *argv, "--json")
            assert result.code == 0, (argv, result.err)
            assert time.monotonic() - started < QUICK_S, argv
            json.loads(result.out)
        doc = json.loads(run_cli(capsys, "--db", store_url, "sessions", "--json").out)
        assert "uncommitted" not in {s["source"] for s in doc["sessions"]}


def test_migrate_upgrades_an_older_schema_that_other_commands_refuse(capsys, store_url, backend) -> None:
    dialect = "sqlite" if backend == "sqlite" else "postgres"
    older, latest = latest_version(dialect) - 1, latest_version(dialect)
    plant_schema(backend, store_url, older)
    if older >= 1:  # an older deployment: every command refuses it, naming the fix
        for argv in (["sessions"], ["compact", "x"], ["locks", "--reap"]):
            result = run_cli(capsys, "--db", store_url, *argv)
            assert result.code == 2 and "session-actors migrate" in result.err, (argv, result.err)
    result = run_cli(capsys, "--db", store_url, "migrate", "--json")
    assert result.code == 0, result.err
    assert json.loads(result.out) == {"schema_version": latest, "previous_version": older, "migrated": True}
    again = run_cli(capsys, "--db", store_url, "migrate")
    assert again.code == 0 and f"schema is current (version {latest})" in again.out
    assert json.loads(run_cli(capsys, "--db", store_url, "sessions", "--json").out)["sessions"] == []


def test_migrate_needs_an_existing_database(capsys, tmp_path) -> None:
    missing = tmp_path / "nope.db"
    result = run_cli(capsys, "--db", str(missing), "migrate")
    assert result.code == 2 and "not found" in result.err
    assert not missing.exists()
