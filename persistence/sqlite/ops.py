"""Transaction bodies of the SQLite backend: functions of an open connection.

Write bodies run inside the writer's transaction (a SAVEPOINT of a group
commit); read bodies run inside a read transaction. They raise our errors;
raising rolls back everything the body wrote.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import (
    END_REASON_COMPRESSION,
    CompactionRecord,
    InvalidLineageError,
    Lease,
    LeaseLostError,
    LineageForkedError,
    SessionEndedError,
    SessionExistsError,
    SessionNotFoundError,
    SnapshotRetractedError,
)

from .. import killpoints
from ..rows import check_watermark, compaction_from_row, derive_child_id, new_incarnation, other_incarnation

__all__ = [
    "append_rows",
    "commit_compaction",
    "create_session",
    "end_session",
    "ended_error",
    "require_incarnation",
    "require_session",
    "resolve",
]

Queries = Mapping[str, str]
Row = sqlite3.Row


def require_session(conn: sqlite3.Connection, q: Queries, session_id: str) -> Row:
    row = conn.execute(q["get_session"], {"session_id": session_id}).fetchone()
    if row is None:
        raise SessionNotFoundError(session_id)
    return row


def require_incarnation(conn: sqlite3.Connection, q: Queries, session_id: str,
                        incarnation: str | None) -> Row:
    """The session's row, if it is the conversation the writer means (``incarnation``
    None: any): one erased and started again under the same id is not."""
    row = require_session(conn, q, session_id)
    if incarnation is not None and row["incarnation"] != incarnation:
        raise other_incarnation(session_id)
    return row


def resolve(conn: sqlite3.Connection, q: Queries, session_id: str) -> str:
    """Follow compression-ended sessions to their unique continuation."""
    current = session_id
    seen = {current}
    while True:
        row = require_session(conn, q, current)
        if row["end_reason"] != END_REASON_COMPRESSION:
            return current
        kids = [r["id"] for r in conn.execute(q["child_ids"], {"session_id": current})]
        if not kids:
            return current
        if len(kids) > 1:
            raise LineageForkedError(current, kids)
        if kids[0] in seen:  # only a hand-edited database can loop
            raise InvalidLineageError(kids[0], current, f"lineage cycle through {current!r}")
        current = kids[0]
        seen.add(current)


def ended_error(conn: sqlite3.Connection, q: Queries, row: Row) -> SessionEndedError:
    """The error for writing to an ended session, naming its live successor if unique."""
    successor = None
    if row["end_reason"] == END_REASON_COMPRESSION:
        try:
            tip = resolve(conn, q, row["id"])
        except (LineageForkedError, InvalidLineageError):
            tip = row["id"]
        tip_row = conn.execute(q["get_session"], {"session_id": tip}).fetchone()
        live = tip_row is not None and tip_row["ended_at"] is None
        successor = tip if tip != row["id"] and live else None
    return SessionEndedError(row["id"], successor_id=successor, end_reason=row["end_reason"])


def create_session(
    conn: sqlite3.Connection, q: Queries, session_id: str, source: str,
    parent_session_id: str | None, now: float, metadata: str = "{}",
) -> Row:
    incarnation = new_incarnation()
    if parent_session_id is not None:  # the parent first, as on PostgreSQL
        parent = require_session(conn, q, parent_session_id)
        if parent["end_reason"] != END_REASON_COMPRESSION:
            raise InvalidLineageError(session_id, parent_session_id)
        incarnation = parent["incarnation"]  # a continuation of the same conversation
    if conn.execute(q["get_session"], {"session_id": session_id}).fetchone() is not None:
        raise SessionExistsError(session_id)
    conn.execute(
        q["insert_session"],
        {"session_id": session_id, "source": source, "parent_session_id": parent_session_id,
         "now": now, "metadata": metadata, "incarnation": incarnation},
    )
    return require_session(conn, q, session_id)


def end_session(conn: sqlite3.Connection, q: Queries, session_id: str, reason: str, now: float) -> Row:
    row = require_session(conn, q, session_id)
    if row["ended_at"] is not None:
        if row["end_reason"] == reason:
            return row  # idempotent
        raise ended_error(conn, q, row)
    conn.execute(q["end_session"], {"session_id": session_id, "reason": reason, "now": now})
    return require_session(conn, q, session_id)


def _insert(
    conn: sqlite3.Connection, q: Queries, session_id: str, params: Sequence[Mapping[str, Any]],
    now: float, first_seq: int, origins: Sequence[int | None] | None = None,
) -> list[int]:
    """Insert rows at seqs ``first_seq``... (already reserved on the session row); their ids."""
    ids = []
    for offset, p in enumerate(params):
        origin = origins[offset] if origins else None
        row = {**p, "session_id": session_id, "seq": first_seq + offset, "now": now, "origin_id": origin}
        ids.append(conn.execute(q["insert_message"], row).lastrowid)
    return ids


def _reserve(conn: sqlite3.Connection, q: Queries, session_id: str, count: int) -> int:
    """Move the session's seq counter by ``count`` in this transaction: seqs stay gapless."""
    return conn.execute(q["advance_next_seq"], {"session_id": session_id, "count": count}).fetchone()["first_seq"]


def append_rows(
    conn: sqlite3.Connection, q: Queries, session_id: str, params: Sequence[Mapping[str, Any]], now: float,
    incarnation: str | None = None,
) -> tuple[int, list[int]]:
    """Append in the writer's transaction; returns ``(first_seq, ids)``. Kept lean: it
    runs on the single writer thread, so every statement here costs all callers."""
    reserved = conn.execute(
        q["advance_live_next_seq"],
        {"session_id": session_id, "count": len(params), "incarnation": incarnation},
    ).fetchone()
    if reserved is None:  # unknown, another incarnation, or ended: find out which
        row = require_incarnation(conn, q, session_id, incarnation)
        raise ended_error(conn, q, row)
    first_seq = reserved["first_seq"]
    return first_seq, _insert(conn, q, session_id, params, now, first_seq)


_COPIED = ("role", "content", "name", "tool_call_id", "tool_calls", "meta")


def commit_compaction(
    conn: sqlite3.Connection, q: Queries, lease: Lease, *, watermark: int,
    params: Sequence[Mapping[str, Any]], mode: str, child_session_id: str | None,
    compressor: str, now: float,
) -> CompactionRecord:
    sid = lease.session_id
    session = require_session(conn, q, sid)
    # The fence is the transaction's first write: a stale holder writes nothing.
    fence = conn.execute(
        q["fence_lease"],
        {"session_id": sid, "holder": lease.holder, "token": lease.token, "now": now},
    ).fetchone()
    if fence is None:
        raise LeaseLostError(sid, lease.holder, lease.token)
    if killpoints.ARMED:
        killpoints.reached("after_fence", "commit_compaction")
    if session["ended_at"] is not None:
        raise ended_error(conn, q, session)
    check_watermark(sid, watermark, session["next_seq"])
    _check_snapshot_live(conn, q, sid, watermark)
    archived_count, tail = _archive_live(conn, q, sid, watermark, now)
    epoch = conn.execute(q["bump_epoch"], {"session_id": sid}).fetchone()["epoch"]
    target = sid
    if mode == "rotate":
        target = child_session_id or derive_child_id(sid, epoch)
        _start_child(conn, q, session, target, now)
    rows = [*params, *({k: r[k] for k in _COPIED} for r in tail)]
    origins = [None] * len(params) + [r["id"] for r in tail]
    _insert(conn, q, target, rows, now, _reserve(conn, q, target, len(rows)), origins)
    record = conn.execute(
        q["insert_compaction"],
        {
            "session_id": sid, "child_session_id": target if mode == "rotate" else None,
            "mode": mode, "token": lease.token, "holder": lease.holder, "watermark": watermark,
            "archived_count": archived_count, "tail_count": len(tail), "compressor": compressor,
            "started_at": fence["acquired_at"], "now": now,
        },
    ).fetchone()
    return compaction_from_row(record)


def _check_snapshot_live(conn: sqlite3.Connection, q: Queries, sid: str, watermark: int) -> None:
    """The snapshot's last message must still be live: retract only pops from the
    end, so if it is, nothing the snapshot held was retracted."""
    row = conn.execute(q["watermark_state"], {"session_id": sid, "watermark": watermark}).fetchone()
    if row is not None and row["state"] in ("retracted", "pruned"):
        raise SnapshotRetractedError(sid, watermark)


def _archive_live(
    conn: sqlite3.Connection, q: Queries, sid: str, watermark: int, now: float
) -> tuple[int, list[Row]]:
    """Mark live rows up to the watermark compacted and the tail superseded; returns
    the compacted count and the tail rows (to be copied, in seq order)."""
    live = conn.execute(q["transcript"], {"session_id": sid}).fetchall()
    tail = [r for r in live if r["seq"] > watermark]
    params = {"session_id": sid, "watermark": watermark, "now": now}
    conn.execute(q["mark_compacted"], params)
    conn.execute(q["mark_superseded"], params)  # now none is live: transcripts start past them
    conn.execute(q["close_live_range"], {"session_id": sid})
    return len(live) - len(tail), tail


def _start_child(conn: sqlite3.Connection, q: Queries, parent: Row, child_id: str, now: float) -> None:
    """End the parent by compression (only if still open) and create its continuation."""
    ended = conn.execute(
        q["end_session"], {"session_id": parent["id"], "reason": END_REASON_COMPRESSION, "now": now}
    )
    if ended.rowcount != 1:
        raise ended_error(conn, q, require_session(conn, q, parent["id"]))
    if conn.execute(q["get_session"], {"session_id": child_id}).fetchone() is not None:
        raise SessionExistsError(child_id)
    conn.execute(  # a continuation starts with its parent's metadata and incarnation
        q["insert_session"],
        {"session_id": child_id, "source": parent["source"], "parent_session_id": parent["id"],
         "now": now, "metadata": parent["metadata"], "incarnation": parent["incarnation"]},
    )
