"""``readonly=True`` on a read-only filesystem (a real tmpfs remounted read-only;
skipped where mounting is not allowed): reads work, every write is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from persistence import open_store
from protocol import Message, ReadOnlyStoreError

from .tmpfs import mounted_tmpfs


@pytest.fixture
def mount(tmp_path):
    with mounted_tmpfs(tmp_path, "8m") as point:
        yield point


def _remount_read_only(point: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True)


@pytest.mark.timeout(60)
def test_readonly_store_reads_a_database_on_a_read_only_filesystem(mount):
    path = str(mount / "state.db")
    with open_store(path) as store:  # closed cleanly: its WAL checkpointed away
        store.create_session("s")
        store.append("s", [Message("user", "hi"), Message("assistant", "hello")])
    _remount_read_only(mount)
    with open_store(path, readonly=True) as ro:
        assert [m.content for m in ro.transcript("s")] == ["hi", "hello"]
        with pytest.raises(ReadOnlyStoreError):
            ro.append("s", Message("user", "more"))
