"""Per-row checksums on SQLite: a CRC-32 of a message row's text, written with the row.

SQLite's ``integrity_check`` verifies pages and indexes, not the bytes inside a
value: a flipped byte in a message's text that keeps the page well-formed goes
unnoticed by it. Every row written since schema version 10 carries the CRC-32 of
its columns' UTF-8 bytes (role, content, name, tool_call_id, tool_calls, meta,
joined by a unit separator); fsck reads the stored bytes back and compares. SQLite
has no hash function of its own, so the writer computes it; rows written before
version 10, and pruned rows (whose text is gone by design), have none.
"""

from __future__ import annotations

import sqlite3
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["damaged_rows", "row_checksum"]

_SEP = "\x1f"


def row_checksum(p: Mapping[str, Any]) -> int:
    """The checksum of a row's checked column values (as `message_params` builds them)."""
    text = _SEP.join(
        (p["role"], p["content"], p["name"] or "", p["tool_call_id"] or "", p["tool_calls"] or "", p["meta"])
    )
    return zlib.crc32(text.encode())


def damaged_rows(conn: sqlite3.Connection, q: Mapping[str, str]) -> Iterator[tuple[str, int]]:
    """(session id, seq) of every row whose stored bytes no longer match its checksum.
    Reads the raw bytes (``CAST AS BLOB``): a flip that breaks UTF-8 is still a
    mismatch, not a decoding error."""
    sep = _SEP.encode()
    for session_id, seq, checksum, *columns in conn.execute(q["checksummed_rows"]):
        if zlib.crc32(sep.join(c or b"" for c in columns)) != checksum:
            yield session_id, seq
