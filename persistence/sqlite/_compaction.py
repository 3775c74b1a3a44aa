"""The fenced compaction commit of the SQLite backend.

`commit_compaction` is the body of one write transaction (``BEGIN IMMEDIATE``: the
file's write lock is held from its start, so no other process writes meanwhile).
Its first write is the fencing check: an UPDATE of the lease row that matches only
while the row has this holder and token and has not expired on the store's clock.
A stale holder (paused, expired, taken over) matches nothing and writes nothing.
Then the snapshot is checked against the live transcript (nothing it holds was
retracted, its watermark is below the seq counter), the live rows up to the
watermark are archived, the tail is copied after the summary, and a rotation ends
the parent and starts its child, all in the same transaction.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import (
    END_REASON_COMPRESSION,
    CompactionRecord,
    Lease,
    LeaseLostError,
    SessionExistsError,
    SnapshotRetractedError,
    TurnHeldError,
)

from .. import _hooks as hooks
from .._rows import check_watermark, compaction_from_row, derive_child_id
from ..sql._lineage import ended_error, require_incarnation
from ._sessions import insert_rows, reserve_seqs

__all__ = ["commit_compaction"]

Queries = Mapping[str, str]
Row = sqlite3.Row


# a copy keeps its original's idempotency key and the turn it was appended in
_COPIED = ("role", "content", "name", "tool_call_id", "tool_calls", "meta", "key", "turn")


def commit_compaction(
    conn: sqlite3.Connection,
    q: Queries,
    lease: Lease,
    *,
    watermark: int,
    params: Sequence[Mapping[str, Any]],
    mode: str,
    child_session_id: str | None,
    compressor: str,
    usage: str | None,
    now: float,
    incarnation: str | None = None,
) -> CompactionRecord:
    sid = lease.session_id
    # the conversation meant (an erased and re-created id is another one, its tokens anew)
    session = require_incarnation(conn, q, sid, incarnation)
    # The fence is the transaction's first write: a stale holder writes nothing.
    fence = conn.execute(
        q["fence_lease"],
        {"session_id": sid, "holder": lease.holder, "token": lease.token, "now": now},
    ).fetchone()
    unfenced = hooks.skipped("fencing")  # a test proving these checks matter
    if fence is None and not unfenced:
        raise LeaseLostError(sid, lease.holder, lease.token)
    hooks.point("after_fence", "commit_compaction")
    if not unfenced:
        if session["ended_at"] is not None:
            raise ended_error(conn, q, sid)
        check_watermark(sid, watermark, session["next_seq"])
        _check_snapshot_live(conn, q, sid, watermark)
    archived_count, tail = _archive_live(conn, q, sid, watermark, now, _held_turn(session))
    epoch = conn.execute(q["bump_epoch"], {"session_id": sid}).fetchone()["epoch"]
    target = sid
    if mode == "rotate":
        target = child_session_id or derive_child_id(sid, epoch)
        _start_child(conn, q, session, target, now)
    rows = [*params, *({k: r[k] for k in _COPIED} for r in tail)]
    origins = [None] * len(params) + [r["id"] for r in tail]
    written_from = reserve_seqs(conn, q, target, len(rows))
    insert_rows(conn, q, target, rows, now, written_from, origins)
    record = conn.execute(
        q["insert_compaction"],
        {
            "session_id": sid,
            "child_session_id": target if mode == "rotate" else None,
            "mode": mode,
            "token": lease.token,
            "holder": lease.holder,
            "watermark": watermark,
            "archived_count": archived_count,
            "tail_count": len(tail),
            "compressor": compressor,
            "started_at": now if fence is None else fence["acquired_at"],
            "now": now,
            "replaced_from": session["live_from"],
            "written_from": written_from,
            "summary_count": len(params),
            "usage": usage,
        },
    ).fetchone()
    return compaction_from_row(record)


def _check_snapshot_live(conn: sqlite3.Connection, q: Queries, sid: str, watermark: int) -> None:
    """The snapshot's last message must still be live: retract only pops from the
    end, so if it is, nothing the snapshot held was retracted."""
    row = conn.execute(q["watermark_state"], {"session_id": sid, "watermark": watermark}).fetchone()
    if row is not None and row["state"] in ("retracted", "pruned"):
        raise SnapshotRetractedError(sid, watermark)


def _held_turn(session: Row) -> int | None:
    """The token of the turn the session holds, live or dead (not yet sealed), if any."""
    if session["turn_holder"] is None:
        return None
    return session["turn_token"]


def _archive_live(
    conn: sqlite3.Connection, q: Queries, sid: str, watermark: int, now: float, turn: int | None
) -> tuple[int, list[Row]]:
    """Mark live rows up to the watermark compacted and the tail superseded; returns
    the compacted count and the tail rows (to be copied, in seq order). A snapshot
    reaching into the turn the session holds (``turn``: its token; a dead one too,
    until sealed) is refused: the turn travels whole in the tail."""
    params = {"session_id": sid, "watermark": watermark, "now": now, "turn": turn}
    # the rows up to the watermark are never read here: a long transcript is loaded once, by the snapshot
    if turn is not None and conn.execute(q["turn_in_snapshot"], params).fetchone() is not None:
        raise TurnHeldError(sid, message=f"the snapshot of {sid!r} up to seq {watermark} reaches into an open turn")
    tail = conn.execute(q["live_tail"], params).fetchall()
    compacted = conn.execute(q["archive_compacted"], params).rowcount
    conn.execute(q["supersede_tail"], params)  # now none is live: transcripts start past them
    conn.execute(q["close_live_range"], {"session_id": sid})
    return compacted, tail


def _start_child(conn: sqlite3.Connection, q: Queries, parent: Row, child_id: str, now: float) -> None:
    """End the parent by compression (only if still open) and create its continuation."""
    ended = conn.execute(q["end_session"], {"session_id": parent["id"], "reason": END_REASON_COMPRESSION, "now": now})
    if ended.rowcount != 1 and not hooks.skipped("fencing"):
        raise ended_error(conn, q, parent["id"])
    if conn.execute(q["get_session"], {"session_id": child_id}).fetchone() is not None:
        raise SessionExistsError(child_id)
    conn.execute(  # a continuation starts with its parent's metadata and incarnation
        q["insert_session"],
        {
            "session_id": child_id,
            "source": parent["source"],
            "parent_session_id": parent["id"],
            "now": now,
            "metadata": parent["metadata"],
            "incarnation": parent["incarnation"],
        },
    )
    conn.execute(q["carry_turn"], {"parent_id": parent["id"], "child_id": child_id})
