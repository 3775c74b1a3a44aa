"""Appends/s with the seq counters moved by the rows themselves, and by an UPDATE of their own.

Since schema version 5 a row inserted at its session's seq counter moves the
counter (the SQLite trigger ``messages_next_seq``), and a batch on counters the
writer remembers checks them inside its INSERT: one statement a batch. Before,
the batch ran an UPDATE of its own first (it moved every counter, or none unless
each session was live, of the incarnation meant and at the remembered seq), then
the INSERT. The SQLite work is about the same either way; what the statement
costs is the writer's: Python's sqlite3 lets go of the GIL five times a statement,
and with many callers the writer waits to win it back each time. This script
measures both in one process, side by side: "update" runs on a file whose trigger
is dropped, with the writer's inserts patched to move the counters by that
UPDATE first (the schema 4 way, its SQL kept here), for threads (``store.append``
from 64 threads, one session each) and ``append_async`` (64 tasks on one loop
through a registry). Rounds rotate which goes first, every run on a fresh
database; medians, per-round (paired) ratios and their median are printed.

    python -m tests.benchmarks.bench_trigger
    python -m tests.benchmarks.bench_trigger --rounds 10 --seconds 1

Not collected by pytest.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any

from persistence import open_store
from persistence.sqlite import bulk
from tests.benchmarks.bench_agents import SESSIONS, fresh_run, run_path
from tests.benchmarks.timeboxed import Run, measured_rounds, printed_ratios

MODES = ("threads trigger", "threads update", "append_async trigger", "append_async update")
COMPARED = (("threads trigger", "threads update"), ("append_async trigger", "append_async update"))

# schema 4's statements, as the writer ran them before its INSERT
MOVE_COUNTERS = """UPDATE sessions SET next_seq = moved.value
FROM json_each(:moved) AS moved WHERE sessions.id = moved.key"""
MOVE_REMEMBERED_COUNTERS = MOVE_COUNTERS + """
  AND (SELECT count(*) FROM json_each(:expected) AS e JOIN sessions AS s ON s.id = e.key
       WHERE s.ended_at IS NULL
         AND CASE e.type WHEN 'integer' THEN s.next_seq = e.value
                         ELSE s.next_seq || ' ' || s.incarnation = e.value END) = :count"""


def counters_after(values: list[tuple[Any, ...]]) -> str:
    """Each session's counter past its last row of ``values`` (rows: session_id, seq, ...)."""
    return json.dumps({row[0]: row[1] + 1 for row in values})


def updating_inserts(insert_rows: Callable[..., int]) -> tuple[Callable[..., int], Callable[..., int | None]]:
    """`bulk._insert_rows` and `bulk._checked_insert` as schema 4 ran them: an UPDATE
    of the counters first, then the plain INSERTs."""
    def plain(conn: sqlite3.Connection, q: Mapping[str, str], values: list[tuple[Any, ...]]) -> int:
        conn.execute(MOVE_COUNTERS, {"moved": counters_after(values)})
        return insert_rows(conn, q, values)

    def checked(conn: sqlite3.Connection, q: Mapping[str, str], values: list[tuple[Any, ...]],
                expected: list[Any]) -> int | None:
        count, remembered = expected
        moved = conn.execute(MOVE_REMEMBERED_COUNTERS, {
            "moved": counters_after(values), "expected": remembered, "count": count}).rowcount
        return insert_rows(conn, q, values) if moved == count else None

    return plain, checked


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    how = "threads" if mode.startswith("threads") else "append_async"
    if mode.endswith("trigger"):
        return fresh_run(directory, mode, seconds, tag, how)
    path = run_path(directory, mode, tag)
    open_store(path).close()  # migrated to the current schema, then its trigger dropped
    with sqlite3.connect(path) as conn:
        conn.execute("DROP TRIGGER messages_next_seq")
    saved = bulk._insert_rows, bulk._checked_insert
    bulk._insert_rows, bulk._checked_insert = updating_inserts(bulk._insert_rows)
    try:
        return fresh_run(directory, mode, seconds, tag, how)  # opens the same file
    finally:
        bulk._insert_rows, bulk._checked_insert = saved


def main() -> None:
    printed_ratios(*measured_rounds(__doc__, MODES, run_mode, rounds=8, sessions=SESSIONS), COMPARED)


if __name__ == "__main__":
    main()
