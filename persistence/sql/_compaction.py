"""The fenced compaction commit, one function for every dialect.

`commit_compaction` is the body of one write transaction, its steps in one order:

1. the fence, the transaction's first write: an UPDATE of the lease row that
   matches only while the row has this holder and token and has not expired on the
   dialect's clock. A stale holder (paused, expired, taken over) matches nothing and
   writes nothing (`LeaseLostError`). Where writes take row locks (PostgreSQL) it
   leaves the lease row locked until COMMIT, so a takeover is ordered after us;
2. the session row, its epoch bumped (the row lock appends take too: an append
   committed before it is in the tail, one after it gets seqs after ours);
3. the checks: the conversation meant, not ended, the watermark below the seq
   counter, the snapshot's last row still live, no row of the held turn in it;
4. the live rows up to the watermark archived, the tail superseded;
5. a rotation ends the parent and creates its continuation (a second child finds
   the parent ended);
6. the summary and the copied tail written past the seq counter (the dialect's
   insert), the compaction's record, and the dialect's word to other processes.

A summary row that repeats a row this commit archived verbatim (a head-tail
compressor keeps the system prompt and the first ask) is that message, not a new
one: it is written as its copy (``origin_id``), as a copied tail row is, so search
finds the message once, at its newest copy.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

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
from .._rows import check_watermark, compaction_from_row, derive_child_id, other_incarnation
from ._lineage import ended_error, require_session

if TYPE_CHECKING:
    from ._dialect import Cursor, Dialect

__all__ = ["commit_compaction", "compactions", "logged"]

Queries = Mapping[str, str]

logger = logging.getLogger("session_actors.store")


def commit_compaction(
    cur: Cursor,
    dialect: Dialect,
    lease: Lease,
    *,
    watermark: int,
    params: Sequence[Mapping[str, Any]],
    mode: str,
    child_session_id: str | None,
    compressor: str,
    usage: str | None,
    incarnation: str | None = None,
) -> CompactionRecord:
    """Publish one compaction (see the module docstring); raise, and so roll back, on
    any refusal."""
    q, now, sid = dialect.queries, dialect.clock(), lease.session_id
    fence = cur.execute(
        q["fence_lease"], {"session_id": sid, "holder": lease.holder, "token": lease.token, "now": now}
    ).fetchone()
    # hooks.skipped(check): a test proving that check is what matters turned it off
    if fence is None and not hooks.skipped("fence"):
        require_session(cur, q, sid)  # unknown id: SessionNotFoundError
        raise LeaseLostError(sid, lease.holder, lease.token)
    hooks.point("after_fence", "commit_compaction")
    session = cur.execute(q["bump_epoch"], {"session_id": sid}).fetchone()
    if session is None:
        raise ended_error(cur, q, sid)  # erased since the fence: SessionNotFoundError
    if incarnation is not None and session["incarnation"] != incarnation:
        raise other_incarnation(sid)  # erased and re-created: another conversation, its tokens anew
    if session["ended_at"] is not None and not hooks.skipped("ended"):
        raise ended_error(cur, q, sid)
    if not hooks.skipped("watermark"):
        check_watermark(sid, watermark, int(session["next_seq"]))
    if not hooks.skipped("snapshot"):
        _check_snapshot_live(cur, q, sid, watermark)
    _check_outside_turn(cur, q, sid, watermark, session["held_turn"])
    archived = {"session_id": sid, "watermark": watermark, "now": now}
    archived_count = cur.execute(q["archive_compacted"], archived).rowcount
    tail = sorted(cur.execute(q["supersede_tail"], archived).fetchall(), key=lambda r: r["seq"])
    cur.execute(q["close_live_range"], {"session_id": sid})  # none is live now: transcripts start past them
    target = sid
    if mode == "rotate":
        target = child_session_id or derive_child_id(sid, int(session["epoch"]))
        _start_child(cur, dialect, session, target)
    count = {"session_id": target, "count": len(params) + len(tail)}
    written_from = int(cur.execute(q["advance_next_seq"], count).fetchone()["first_seq"])
    summary = _linked_to_originals(cur, dialect, sid, int(session["live_from"]), watermark, params)
    dialect.insert_compacted(cur, target, written_from, summary, tail)
    row = cur.execute(
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
    record = compaction_from_row(row)
    dialect.compaction_committed(cur, record)
    return record


def logged(record: CompactionRecord) -> CompactionRecord:
    """``record``, once its commit is noted in the store's log."""
    logger.info(
        "compaction committed: session=%s mode=%s token=%d watermark=%d archived=%d tail=%d child=%s",
        record.session_id,
        record.mode,
        record.token,
        record.watermark,
        record.archived_count,
        record.tail_count,
        record.child_session_id,
    )
    return record


def compactions(cur: Cursor, q: Queries, session_id: str) -> list[CompactionRecord]:
    """The compaction records of ``session_id``, oldest first."""
    require_session(cur, q, session_id)
    return [compaction_from_row(r) for r in cur.execute(q["compactions"], {"session_id": session_id}).fetchall()]


_VERBATIM = ("role", "content", "name", "tool_call_id", "tool_calls", "meta")


def _linked_to_originals(
    cur: Cursor, dialect: Dialect, sid: str, replaced_from: int, watermark: int, params: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """``params`` with ``origin_id``: the row of the archived snapshot each repeats
    column for column, or None. One original per summary row, in seq order, so two
    equal rows are two copies of two originals and no original is copied twice."""
    contents = dialect.id_list(sorted({p["content"] for p in params}))
    found = cur.execute(
        dialect.queries["verbatim_originals"],
        {"session_id": sid, "replaced_from": replaced_from, "watermark": watermark, "contents": contents},
    ).fetchall()
    unclaimed: dict[tuple[Any, ...], deque[int]] = {}
    for row in found:
        unclaimed.setdefault(tuple(row[k] for k in _VERBATIM), deque()).append(int(row["id"]))
    linked = []
    for p in params:
        originals = unclaimed.get(tuple(p[k] for k in _VERBATIM))
        linked.append({**p, "origin_id": originals.popleft() if originals else None})
    return linked


def _check_snapshot_live(cur: Cursor, q: Queries, sid: str, watermark: int) -> None:
    """The snapshot's last message must still be live (checked under the session row
    lock a retraction takes too): retract only pops from the end, so if it is,
    nothing the snapshot held was retracted."""
    row = cur.execute(q["watermark_state"], {"session_id": sid, "watermark": watermark}).fetchone()
    if row is not None and row["state"] in ("retracted", "pruned"):
        raise SnapshotRetractedError(sid, watermark)


def _check_outside_turn(cur: Cursor, q: Queries, sid: str, watermark: int, turn: int | None) -> None:
    """The snapshot must not reach into the turn the session holds (``turn``: its
    token; a dead one too, until sealed): the turn travels whole in the tail. The
    rows up to the watermark are never read here: a long transcript is loaded once,
    by the snapshot."""
    params = {"session_id": sid, "watermark": watermark, "turn": turn}
    if turn is not None and cur.execute(q["turn_in_snapshot"], params).fetchone() is not None:
        raise TurnHeldError(sid, message=f"the snapshot of {sid!r} up to seq {watermark} reaches into an open turn")


def _start_child(cur: Cursor, dialect: Dialect, parent: Any, child_id: str) -> None:
    """End the parent by compression (only if still open) and create its continuation,
    which carries the parent's turn lease, metadata and incarnation."""
    q = dialect.queries
    params = {"session_id": parent["id"], "reason": END_REASON_COMPRESSION, "now": dialect.clock()}
    if cur.execute(q["end_session"], params).rowcount != 1 and not hooks.skipped("parent_open"):
        raise ended_error(cur, q, parent["id"])
    if cur.execute(q["get_session"], {"session_id": child_id}).fetchone() is not None:
        raise SessionExistsError(child_id)
    try:
        dialect.insert_child(cur, parent, child_id)
    except dialect.duplicate_session as exc:  # created by a transaction committed since the look
        raise SessionExistsError(child_id) from exc
