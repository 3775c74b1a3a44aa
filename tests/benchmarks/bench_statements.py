"""Appends/s by the statements a batch of appends costs the SQLite writer: 1, 3 or 4.

Every statement the writer runs lets go of the GIL (Python's sqlite3 does so five
times a statement), and with many callers the writer then waits to win it back;
the SQLite work is about the same whichever way the batch is written. Side by
side in one process, for threads (``store.append`` from 64 threads, one session
each) and ``append_async`` (64 tasks on one loop through a registry):

- ``1 statement`` (the code as it is): a batch on counters the writer remembers
  is one checked INSERT outside a transaction (SQLite makes it its own, the
  COMMIT inside it), its rows moving their counters (schema 5's trigger);
- ``3 statements``: the same batch in ``BEGIN IMMEDIATE ... COMMIT`` (the one
  statement path patched off: ``AloneAppends.planned`` answers None);
- ``4 statements``: schema 4's way, an UPDATE of the counters before the INSERT
  (it moved every counter, or none unless each session was live, of the
  incarnation meant and at the remembered seq), in a transaction: the trigger
  dropped from that file and the writer's inserts patched to run that UPDATE
  first (its SQL kept here).

Rounds rotate which goes first, every run on a fresh database; medians,
per-round (paired) ratios and their median are printed.

    python -m tests.benchmarks.bench_statements
    python -m tests.benchmarks.bench_statements --rounds 10 --seconds 1

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

HOWS = ("threads", "append_async")  # as `fresh_run` names them
WAYS = ("1 statement", "3 statements", "4 statements")
MODES = tuple(f"{how} {way}" for how in HOWS for way in WAYS)
COMPARED = tuple((f"{how} {a}", f"{how} {b}") for how in HOWS
                 for a, b in (("1 statement", "3 statements"), ("3 statements", "4 statements"),
                              ("1 statement", "4 statements")))

# schema 4's statements, as the writer ran them before its INSERT
MOVE_COUNTERS = """UPDATE sessions SET next_seq = moved.value
FROM json_each(:moved) AS moved WHERE sessions.id = moved.key"""
MOVE_REMEMBERED_COUNTERS = MOVE_COUNTERS + """
  AND (SELECT count(*) FROM json_each(:expected) AS e JOIN sessions AS s ON s.id = e.key
       WHERE s.ended_at IS NULL
         AND CASE e.type WHEN 'integer' THEN s.next_seq = e.value
                         ELSE s.next_seq || ' ' || s.incarnation = e.value END) = :count"""


def counters_after(values: list[Any]) -> str:
    """Each session's counter past its last row of ``values`` (`bulk.ROW_WIDTH` a row:
    session_id, seq, ...)."""
    width = bulk.ROW_WIDTH
    return json.dumps({values[i]: values[i + 1] + 1 for i in range(0, len(values), width)})


def updating_inserts(insert_rows: Callable[..., int]) -> tuple[Callable[..., int], Callable[..., int | None]]:
    """`bulk._insert_rows` and `bulk._checked_insert` as schema 4 ran them: an UPDATE
    of the counters first, then the plain INSERTs."""
    def plain(conn: sqlite3.Connection, q: Mapping[str, str], values: list[Any]) -> int:
        conn.execute(MOVE_COUNTERS, {"moved": counters_after(values)})
        return insert_rows(conn, q, values)

    def checked(conn: sqlite3.Connection, q: Mapping[str, str], values: list[Any],
                expected: list[Any]) -> int | None:
        count, remembered = expected
        moved = conn.execute(MOVE_REMEMBERED_COUNTERS, {
            "moved": counters_after(values), "expected": remembered, "count": count}).rowcount
        return insert_rows(conn, q, values) if moved == count else None

    return plain, checked


def run_mode(directory: str, mode: str, seconds: float, tag: str) -> Run:
    how, way = mode.split(" ", 1)
    saved = bulk._insert_rows, bulk._checked_insert, bulk.AloneAppends.planned
    if way != "1 statement":
        bulk.AloneAppends.planned = lambda self, jobs: None  # type: ignore[method-assign]
    if way == "4 statements":
        path = run_path(directory, mode, tag)
        open_store(path).close()  # migrated to the current schema, then its trigger dropped
        with sqlite3.connect(path) as conn:
            conn.execute("DROP TRIGGER messages_next_seq")
        bulk._insert_rows, bulk._checked_insert = updating_inserts(bulk._insert_rows)
    try:
        return fresh_run(directory, mode, seconds, tag, how)  # on that file, if made above
    finally:
        bulk._insert_rows, bulk._checked_insert, bulk.AloneAppends.planned = saved  # type: ignore[method-assign]


def main() -> None:
    printed_ratios(*measured_rounds(__doc__, MODES, run_mode, rounds=6, sessions=SESSIONS), COMPARED)


if __name__ == "__main__":
    main()
