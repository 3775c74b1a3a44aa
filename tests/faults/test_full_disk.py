"""A full disk: SQLite on an 8 MiB tmpfs that fills up while a worker writes.

Needs root to mount a tmpfs (skipped otherwise). A filler file leaves a little room;
a worker process appends and compacts until the WAL fills the disk. Every call that
fails must raise one of our errors (the worker goes on) and write nothing. Once its
first call failed, the worker waits; the trial removes the filler and lets it go on:
the same store object must work again (later appends are acknowledged, without
reopening). Every acknowledged message is there, a new registry appends and
compacts, and nothing forked or left a gap.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.simulate._ledger import read_ledgers
from persistence import open_store

from .harness import (
    Tally,
    check_after_failures,
    failed_calls,
    finish,
    spawn_worker,
    trials,
    wait_until,
)

#: Bigger than SQLite's WAL at its auto-checkpoint (1000 pages, 4 MiB), so freeing the
#: filler is enough for the store to go on.
TMPFS_SIZE = "8m"
#: Room left on the tmpfs for the database once the filler is written.
ROOM_BYTES = 200_000


@pytest.fixture
def tmpfs(tmp_path) -> Iterator[Path]:
    mountpoint = tmp_path / "tmpfs"
    mountpoint.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs", str(mountpoint)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, timeout=30)


@pytest.mark.timeout(300)
def test_full_disk(tmpfs: Path, tmp_path: Path, tally: Tally) -> None:
    failures_before = len(tally.failures)
    for trial in range(trials()):
        # the ledger lives off the tmpfs: it must not fill up itself
        tally.record(_one_trial(tmpfs / f"trial-{trial}", tmp_path / f"ledger-{trial}"))
    assert tally.failures[failures_before:] == []


def _one_trial(directory: Path, ledger: Path) -> list[str]:
    directory.mkdir()
    db = str(directory / "state.db")
    open_store(db).close()
    filler = directory / "filler"
    free = os.statvfs(directory).f_bavail * os.statvfs(directory).f_frsize
    filler.write_bytes(b"\0" * max(0, free - ROOM_BYTES))
    root = f"fd-{uuid.uuid4().hex[:8]}"
    resume = ledger.with_suffix(".resume")
    proc = spawn_worker(db, root, ledger, args=["--rounds", "120", "--mode", "in_place", "--resume-file", str(resume)])
    failed_once = lambda: any(line[0] == "failed" for line in read_ledgers([ledger]))  # noqa: E731
    wait_until(lambda: proc.poll() is not None or failed_once(), 60)
    filler.unlink()  # space freed: the worker's own store must pick up again
    resume.touch()
    code, err = finish(proc)
    if code != 0:
        return [f"worker exited {code} on a full disk: {err}"]
    lines = list(read_ledgers([ledger]))
    failed = failed_calls(ledger)
    problems = [] if failed else ["the disk never filled up"]
    first_failure = next((i for i, line in enumerate(lines) if line[0] == "failed"), len(lines))
    if not any(line[0] == "ack" for line in lines[first_failure:]):
        problems.append("the store never worked again after space was freed")
    problems += check_after_failures(db, root, ledger, failed)
    return problems
