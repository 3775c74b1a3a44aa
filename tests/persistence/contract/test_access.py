"""Contract: read-only stores and ``migrate=False`` (both backends).

A read-only store never writes: every write method raises `ReadOnlyStoreError`
and the database is byte-for-byte what it was (a snapshot of every table). With
``migrate=False`` (and read-only) an older schema is refused, naming the command
that upgrades it, and left as it was.
"""

from __future__ import annotations

import os

import pytest

from persistence import open_store
from persistence._migrations import latest_version
from protocol import (
    ConfigurationError,
    Cooldown,
    Message,
    ReadOnlyStoreError,
    SchemaVersionError,
)
from tests.persistence.contract.db import execute, plant_schema, snapshot


def _dialect(backend: str) -> str:
    return "sqlite" if backend == "sqlite" else "postgres"


def _populated(store) -> dict:
    store.create_session("s", source="web")
    store.append("s", [Message("user", "hi"), Message("assistant", "hello")])
    lease = store.acquire_lease("s", "A", 300)
    store.arm_cooldown("s", 60, "boom")
    return {"lease": lease}


#: Every write method of the Store protocol, called with valid arguments.
WRITES = {
    "create_session": lambda s, f: s.create_session("new"),
    "end_session": lambda s, f: s.end_session("s", "done"),
    "append": lambda s, f: s.append("s", Message("user", "more")),
    "acquire_lease": lambda s, f: s.acquire_lease("s", "B", 30),
    "renew_lease": lambda s, f: s.renew_lease(f["lease"], 30),
    "release_lease": lambda s, f: s.release_lease(f["lease"]),
    "reap_leases": lambda s, f: s.reap_leases(),
    "commit_compaction": lambda s, f: s.commit_compaction(
        f["lease"], watermark=1, compacted=[Message("user", "sum")], mode="in_place"
    ),
    "arm_cooldown": lambda s, f: s.arm_cooldown("s", 10, "x"),
    "clear_cooldown": lambda s, f: s.clear_cooldown("s"),
    "restore_cooldown": lambda s, f: s.restore_cooldown("s", Cooldown("s", 1.0, None)),
    "update_metadata": lambda s, f: s.update_metadata("s", {"k": 1}),
    "delete_session": lambda s, f: s.delete_session("s"),
    "retract": lambda s, f: s.retract("s"),
    "prune_archive": lambda s, f: s.prune_archive(older_than_s=0),
}


def test_readonly_store_reads_and_refuses_every_write(store, store_url, backend):
    fixture = _populated(store)
    before = snapshot(backend, store_url)
    ro = open_store(store_url, readonly=True)
    try:
        assert [m.content for m in ro.transcript("s")] == ["hi", "hello"]
        assert ro.current_lease("s") == fixture["lease"]
        assert [i.id for i in ro.sessions()] == ["s"] and ro.resolve("s") == "s"
        assert ro.cooldown("s").error == "boom" and ro.compactions("s") == []
        for name, call in WRITES.items():
            with pytest.raises(ReadOnlyStoreError) as caught:
                call(ro, fixture)
            assert caught.value.operation in WRITES, name  # names the refused method
    finally:
        ro.close()
    assert snapshot(backend, store_url) == before
    assert store.renew_lease(fixture["lease"], 30) is not None  # the writable store still writes


@pytest.mark.parametrize("flags", [{"migrate": False}, {"readonly": True}])
def test_older_schema_is_refused_without_migrating(store_url, backend, flags):
    older = latest_version(_dialect(backend)) - 1
    plant_schema(backend, store_url, older)
    before = schema_objects(backend, store_url)
    with pytest.raises(SchemaVersionError) as caught:
        open_store(store_url, **flags)
    assert (caught.value.found, caught.value.supported) == (older, latest_version(_dialect(backend)))
    assert "session-actors migrate" in str(caught.value)
    assert schema_objects(backend, store_url) == before  # nothing changed
    migrated = open_store(store_url)  # the default migrates
    try:
        migrated.create_session("s")
    finally:
        migrated.close()
    again = open_store(store_url, **flags)
    try:
        assert [i.id for i in again.sessions()] == ["s"]
    finally:
        again.close()


def test_current_schema_opens_with_migrate_false(store, store_url):
    store.create_session("s")
    other = open_store(store_url, migrate=False)
    try:
        other.append("s", Message("user", "written"))  # migrate=False still writes data
    finally:
        other.close()
    assert [m.content for m in store.transcript("s")] == ["written"]


def test_readonly_or_migrate_false_never_creates_a_sqlite_file(tmp_path):
    for flags in ({"readonly": True}, {"migrate": False}):
        path = tmp_path / "missing.db"
        with pytest.raises(ConfigurationError, match="does not exist"):
            open_store(str(path), **flags)
        assert not os.path.exists(path)


@pytest.mark.parametrize("flags", [{"readonly": 1}, {"migrate": "no"}])
def test_flags_must_be_bools(store_url, flags):
    with pytest.raises(ValueError):
        open_store(store_url, **flags)


def schema_objects(backend: str, url: str) -> dict | None:
    """The tables that exist and their definitions (an older schema lacks some)."""
    if backend == "sqlite":
        return {"tables": execute(backend, url, "SELECT name, sql FROM sqlite_master ORDER BY name")}
    return {
        "tables": execute(
            backend,
            url,
            "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() ORDER BY 1",
        )
    }
