"""A ledger of acknowledgements: what a worker was told is durable, fsync'd before it counts.

A worker that may be killed at any moment cannot report what it was acknowledged
at the end. So every acknowledgement is appended to the worker's ledger (one JSON
line, flushed and fsync'd) *before* the worker counts it; a kill between the
store's reply and the ledger write loses the acknowledgement, never invents one.
The check then holds the store to every line: a message in the ledger must exist;
a message written but never acknowledged may or may not.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

__all__ = ["Ledger", "read_ledgers"]


class Ledger:
    """Append-only JSON lines, each durable when `record` returns."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)

    def record(self, kind: str, *values: Any) -> None:
        line = json.dumps([kind, *values], separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode("utf-8"))  # one write: a kill tears at most this line
        os.fsync(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_ledgers(paths: Iterable[str | os.PathLike[str]]) -> Iterator[list[Any]]:
    """Every complete line of the ledgers; a torn last line (killed mid-write) is skipped."""
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            continue
        for raw in data.split(b"\n"):
            if not raw:
                continue
            try:
                yield json.loads(raw)
            except ValueError:
                continue  # only the last line can be torn: it was never counted
