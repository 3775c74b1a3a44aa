"""Bulk appends for group commit: a run of append requests in four statements.

Every statement the single writer runs costs all waiting callers (it also
hands the GIL around), so a run of appends is done with one read of the seq
counters, one ``executemany`` for the counters and one for the rows, and one
read of the last row id, instead of two statements per request.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["AppendJob", "bulk_append"]


@dataclass(frozen=True, slots=True)
class AppendJob:
    """One append request: checked column values for ``session_id``'s next seqs."""

    session_id: str
    params: Sequence[Mapping[str, Any]]


def bulk_append(
    conn: sqlite3.Connection, q: Mapping[str, str], jobs: list[AppendJob], clock: Callable[[], float]
) -> list[tuple[int, list[int], float]] | None:
    """Append every job; per job ``(first_seq, ids, created_at)`` like the single path.

    None, having written nothing, when a session is unknown or ended: the writer
    then replays the batch request by request, so only those requests fail.
    """
    session_ids = list(dict.fromkeys(job.session_id for job in jobs))
    rows = conn.execute(q["sessions_for_append"], {"ids": json.dumps(session_ids)}).fetchall()
    next_seq = {r["id"]: r["next_seq"] for r in rows if r["ended_at"] is None}
    if len(next_seq) != len(session_ids):
        return None
    now = clock()  # read under the write lock, like every write's clock
    firsts, inserts = [], []
    for job in jobs:
        first = next_seq[job.session_id]
        next_seq[job.session_id] = first + len(job.params)
        firsts.append(first)
        for offset, p in enumerate(job.params):
            inserts.append({**p, "session_id": job.session_id, "seq": first + offset, "now": now, "origin_id": None})
    conn.executemany(q["set_next_seq"], [{"session_id": s, "next_seq": n} for s, n in next_seq.items()])
    if inserts:
        conn.executemany(q["insert_message"], inserts)
        last_id = conn.execute(q["last_insert_id"]).fetchone()["id"]
    else:
        last_id = 0
    # AUTOINCREMENT under the exclusive write lock, with no trigger inserting into
    # messages, hands out consecutive ids: the run's rows are last_id-n+1 .. last_id.
    next_id = last_id - len(inserts) + 1
    results = []
    for job, first in zip(jobs, firsts):
        ids = list(range(next_id, next_id + len(job.params)))
        next_id += len(job.params)
        results.append((first, ids, now))
    return results
