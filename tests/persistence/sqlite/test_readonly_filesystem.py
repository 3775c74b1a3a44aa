"""``readonly=True`` on a read-only filesystem (a real tmpfs remounted read-only;
skipped where mounting is not allowed): reads work, every write is refused."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest

from persistence import open_store
from protocol import Message, ReadOnlyStoreError


@pytest.fixture
def mount(tmp_path):
    point = tmp_path / f"ro-{uuid.uuid4().hex[:6]}"
    point.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(point)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield point
    finally:
        subprocess.run(["umount", "-l", str(point)], check=False)


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
