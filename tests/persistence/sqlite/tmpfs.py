"""A real tmpfs for the tests that need a filesystem of their own (full, read-only)."""

from __future__ import annotations

import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest


@contextmanager
def mounted_tmpfs(parent: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` under ``parent`` (needs root and mount(8)); the test is
    skipped where it cannot be mounted. Unmounted (lazily) afterwards."""
    mount = parent / f"tmpfs-{uuid.uuid4().hex[:6]}"
    mount.mkdir()
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root and mount(8)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
