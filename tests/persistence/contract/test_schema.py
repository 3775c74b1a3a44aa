"""Contract: schema versioning and private database files."""

from __future__ import annotations

import os
import stat

import pytest

from persistence import open_store
from persistence._migrations import latest_version
from protocol import Message, SchemaVersionError
from tests.persistence.contract.db import execute


def _dialect(backend: str) -> str:
    return "sqlite" if backend == "sqlite" else "postgres"


def test_schema_version_recorded(store, store_url, backend):
    rows = execute(backend, store_url, "SELECT max(version) FROM schema_version")
    assert rows == [(latest_version(_dialect(backend)),)]


def test_reopen_keeps_data_and_version(store, store_url, backend):
    store.create_session("s")
    store.append("s", Message("user", "kept"))
    store.close()
    again = open_store(store_url)
    try:
        assert [m.content for m in again.transcript("s")] == ["kept"]
    finally:
        again.close()
    assert execute(backend, store_url, "SELECT count(*) FROM schema_version") == [(latest_version(_dialect(backend)),)]


def test_newer_schema_is_refused(store, store_url, backend):
    store.create_session("s")
    store.close()
    newer = latest_version(_dialect(backend)) + 7
    execute(backend, store_url, f"INSERT INTO schema_version (version, applied_at) VALUES ({newer}, 0)")
    with pytest.raises(SchemaVersionError) as caught:
        open_store(store_url)
    assert caught.value.found == newer
    assert caught.value.supported == latest_version(_dialect(backend))


def test_database_files_are_private(sqlite_path):
    store = open_store(sqlite_path)
    try:
        store.create_session("s")
        store.append("s", Message("user", "secret"))
        for suffix in ("", "-wal", "-shm"):
            path = sqlite_path + suffix
            if os.path.exists(path):
                mode = stat.S_IMODE(os.stat(path).st_mode)
                assert mode & 0o077 == 0, f"{path} has mode {oct(mode)}"
        assert stat.S_IMODE(os.stat(sqlite_path).st_mode) == 0o600
    finally:
        store.close()
