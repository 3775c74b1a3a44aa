"""What the stores say on the logger: driver warnings (never straight to stderr) and
database files others can read (once per file)."""

from __future__ import annotations

import logging
import os
import uuid

import pytest

from persistence import open_store
from tests.pg import pg_rows, with_application_name

pytestmark = pytest.mark.timeout(60)


def test_a_world_readable_database_is_reported_once(tmp_path, caplog):
    path = str(tmp_path / "shared.db")
    open_store(path).close()  # created 0600: nothing to say
    assert not [r for r in caplog.records if "readable by others" in r.getMessage()]
    os.chmod(path, 0o644)
    with caplog.at_level(logging.WARNING, logger="session_actors"):
        for _ in range(3):
            open_store(path).close()
            open_store(path, readonly=True).close()
    warned = [r for r in caplog.records if "readable by others" in r.getMessage()]
    assert len(warned) == 1 and warned[0].name.startswith("session_actors.")
    assert oct(0o644) in warned[0].getMessage()


def test_pool_warnings_go_to_our_logger_not_stderr(pg_url, caplog, capfd):
    app = f"warn-{uuid.uuid4().hex[:8]}"
    store = open_store(with_application_name(pg_url, app), min_size=1, max_size=1)
    try:
        store.create_session("s")
        pg_rows(pg_url, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s", (app,))
        with caplog.at_level(logging.WARNING, logger="session_actors"):
            assert store.transcript("s") == []  # the pool's connection was dead: retried
    finally:
        store.close()
    driver = [r for r in caplog.records if r.name.startswith("session_actors.driver.psycopg")]
    assert driver and any("discarding" in r.getMessage() for r in driver), caplog.records
    assert "discarding" not in capfd.readouterr().err  # not printed by Python's last resort
