"""SQLite under operational stress: ``patience_s`` bounds every call, queueing included,
and a full disk is a typed error the same store object recovers from."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import threading
import time
import uuid

import pytest

from persistence.sqlite import SqliteStore
from protocol import Message, StorageFullError, StoreBusyError

from .tmpfs import mounted_tmpfs

pytestmark = pytest.mark.timeout(120)

PATIENCE_S = 1.0
#: "plus one statement": what a call may take past its patience (a loaded 2-core machine)
SLACK_S = 0.7
CALLERS = 12


@pytest.mark.parametrize("group_commit", [True, False], ids=["group-commit", "one-at-a-time"])
def test_patience_is_a_deadline_for_the_whole_call(sqlite_path, group_commit):
    store = SqliteStore(sqlite_path, patience_s=PATIENCE_S, group_commit=group_commit)
    foreign = sqlite3.connect(sqlite_path, isolation_level=None, timeout=0)
    try:
        for i in range(CALLERS):
            store.create_session(f"s{i}")
        foreign.execute("BEGIN IMMEDIATE")  # another process holds the write lock throughout
        start = threading.Barrier(CALLERS)
        outcomes: list[tuple[float, BaseException | None]] = []

        def call(i: int) -> None:
            start.wait(timeout=30)
            began = time.monotonic()
            try:
                store.append(f"s{i}", Message("user", "blocked"))
                error = None
            except BaseException as exc:  # recorded, asserted below
                error = exc
            outcomes.append((time.monotonic() - began, error))

        threads = [threading.Thread(target=call, args=(i,)) for i in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert len(outcomes) == CALLERS
        for waited, error in outcomes:
            assert isinstance(error, StoreBusyError), error
            assert "write lock" in str(error) and f"patience_s={PATIENCE_S:g}" in str(error)
            assert waited <= PATIENCE_S + SLACK_S, f"a call waited {waited:.2f}s"
        foreign.execute("ROLLBACK")
        assert store.append("s0", Message("user", "after"))[0].seq == 1  # nothing was written
    finally:
        foreign.close()
        store.close()


@pytest.fixture
def small_disk(tmp_path):
    """A real 4 MiB tmpfs (needs root and mount(2)); skipped where it cannot be mounted."""
    with mounted_tmpfs(tmp_path, "4m") as mount:
        yield mount


def fill(path, keep_free: int = 0) -> None:
    """Write a filler file until the disk has (at most) ``keep_free`` bytes left."""
    stat = os.statvfs(path.parent)
    size = max(0, stat.f_bavail * stat.f_frsize - keep_free)
    with open(path, "wb") as out:
        try:
            out.write(b"\0" * size)
            out.flush()
            os.fsync(out.fileno())
        except OSError:
            pass  # full: that is the point


def test_a_full_disk_is_storage_full_and_the_same_store_recovers(small_disk):
    db = small_disk / "state.db"
    store = SqliteStore(str(db))
    try:
        store.create_session("s")
        filler = small_disk / "filler"
        fill(filler, keep_free=256 * 1024)
        acknowledged, failures = [], []
        for i in range(200):  # until the disk is full
            text = f"m{i}:" + "x" * 8000
            try:
                store.append("s", Message("user", text))
                acknowledged.append(text)
            except StorageFullError as exc:
                failures.append((text, exc))
                if len(failures) >= 3:
                    break
        assert failures, "the disk never filled up"
        assert "full" in str(failures[0][1]) and "nothing was written" in str(failures[0][1])
        kept = [m.content for m in store.transcript("s")]
        assert kept == acknowledged  # every acknowledged message, no failed one
        os.remove(filler)  # space is freed: the same store object writes again
        store.append("s", Message("user", "after"))
        assert [m.content for m in store.transcript("s")] == [*acknowledged, "after"]
        # the WAL was checkpointed into the database and truncated first
        assert os.path.getsize(db) > 8000 * len(acknowledged)
        assert os.path.getsize(str(db) + "-wal") < 64 * 1024
    finally:
        store.close()


def test_after_a_full_disk_the_wal_leaves_the_freed_room_to_the_data(small_disk):
    """On a small disk only part of the space comes back: the WAL stays small from
    then on instead of growing back towards its high-water mark (~16 MiB) and
    filling the disk again; hundreds of commits fit in the room freed."""
    db = small_disk / "state.db"
    store = SqliteStore(str(db))
    try:
        store.create_session("s")
        spare = small_disk / "spare"  # what the operator will free: 1.5 MiB
        with open(spare, "wb") as out:
            out.write(b"\0" * (1536 * 1024))
            os.fsync(out.fileno())
        fill(small_disk / "filler", keep_free=64 * 1024)
        for i in range(100):
            try:
                store.append("s", Message("user", f"m{i}:" + "x" * 8000))
            except StorageFullError:
                break
        else:
            pytest.fail("the disk never filled up")
        os.remove(spare)
        for i in range(300):  # one commit each: ~16 kB of WAL frames per commit
            store.append("s", Message("user", f"after {i}: " + "y" * 1000))
        assert os.path.getsize(str(db) + "-wal") <= 80 * 4096 + 32 * 1024  # 64 pages and a commit's worth
        assert len(store.transcript("s")) >= 300
    finally:
        store.close()
