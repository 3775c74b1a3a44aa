"""The fenced compaction commit of the PostgreSQL backend.

`commit_in_transaction` is the body of one transaction. Its first statement is
the fencing check *as a write*: an UPDATE of the lease row that matches only
while the row has this holder and token and has not expired on the database
clock. It leaves the row locked until COMMIT, so a takeover (which must update
that row) is ordered after us, or we see its new token and match nothing. The
second statement locks the session row (bumping its epoch), so concurrent
appends either committed before it — and are in the tail — or wait for our
COMMIT and get seqs after ours. The last statement queues a NOTIFY on the
``session_actors_compaction`` channel, sent by the server only on COMMIT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocol import (
    CompactionRecord,
    Lease,
    LeaseLostError,
    SessionExistsError,
    SnapshotRetractedError,
    TranscriptError,
    TurnHeldError,
)

from .. import _hooks as hooks
from .._rows import check_watermark, compaction_from_row, derive_child_id, other_incarnation
from ..sql._lineage import ended_error, require_session

__all__ = ["column_arrays", "commit_in_transaction"]


def column_arrays(params: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """Column-wise arrays of message params, for the ``unnest`` inserts."""
    return {
        "roles": [p["role"] for p in params],
        "contents": [p["content"] for p in params],
        "names": [p["name"] for p in params],
        "tool_call_ids": [p["tool_call_id"] for p in params],
        "tool_calls": [p["tool_calls"] for p in params],
        "metas": [p["meta"] for p in params],
    }


def commit_in_transaction(
    cur: Any,
    queries: Mapping[str, str],
    lease: Lease,
    *,
    watermark: int,
    compacted: Sequence[Mapping[str, Any]],
    mode: str,
    child_session_id: str | None,
    compressor: str,
    usage: str | None,
    unique_violation: type[Exception],
    incarnation: str | None = None,
) -> CompactionRecord:
    """Publish one compaction; raise (and so roll back) on any refusal."""
    sid = lease.session_id
    started_at = _fence(cur, queries, lease)
    cur.execute(queries["bump_epoch"], {"id": sid})
    session = cur.fetchone()
    if session is None:
        raise ended_error(cur, queries, sid)
    if incarnation is not None and session["incarnation"] != incarnation:
        # erased and re-created: another conversation, whose lease tokens began anew
        raise other_incarnation(sid)
    check_watermark(sid, watermark, int(session["next_seq"]))
    _check_snapshot_live(cur, queries, sid, watermark)
    _check_outside_turn(cur, queries, sid, watermark, session["held_turn"])
    cur.execute(queries["archive_compacted"], {"id": sid, "watermark": watermark})
    archived_count = cur.rowcount
    cur.execute(queries["supersede_tail"], {"id": sid, "watermark": watermark})
    tail_ids = [row["id"] for row in cur.fetchall()]
    cur.execute(queries["close_live_range"], {"id": sid})  # none is live now
    new_rows = len(compacted) + len(tail_ids)

    if mode == "rotate":
        target = child_session_id or derive_child_id(sid, int(session["epoch"]))
        _end_parent(cur, queries, sid)
        _create_child(cur, queries, target, sid, session["source"], new_rows, unique_violation)
        first_seq = 1
    else:
        target, first_seq = sid, int(session["next_seq"])
        cur.execute(queries["set_next_seq"], {"id": sid, "next_seq": first_seq + new_rows})

    cur.execute(
        queries["insert_messages"],
        {"session_id": target, "first_seq": first_seq, **column_arrays(compacted)},
    )
    if tail_ids:
        cur.execute(
            queries["copy_tail"],
            {"target": target, "first_seq": first_seq + len(compacted), "ids": tail_ids},
        )
    cur.execute(
        queries["insert_compaction"],
        {
            "session_id": sid,
            "child_session_id": target if mode == "rotate" else None,
            "mode": mode,
            "token": lease.token,
            "holder": lease.holder,
            "watermark": watermark,
            "archived_count": archived_count,
            "tail_count": len(tail_ids),
            "compressor": compressor,
            "started_at": started_at,
            "replaced_from": session["live_from"],
            "written_from": first_seq,
            "summary_count": len(compacted),
            "usage": usage,
        },
    )
    record = compaction_from_row(cur.fetchone())
    cur.execute(
        queries["notify_compaction"],
        {"session_id": sid, "child_session_id": record.child_session_id, "mode": mode, "token": lease.token},
    )
    return record


def _check_snapshot_live(cur: Any, queries: Mapping[str, str], sid: str, watermark: int) -> None:
    """The snapshot's last message must still be live (checked under the session row
    lock a retraction takes too): retract only pops from the end, so if it is,
    nothing the snapshot held was retracted."""
    cur.execute(queries["watermark_state"], {"id": sid, "watermark": watermark})
    row = cur.fetchone()
    if row is not None and row["state"] in ("retracted", "pruned"):
        raise SnapshotRetractedError(sid, watermark)


def _check_outside_turn(cur: Any, queries: Mapping[str, str], sid: str, watermark: int, turn: int | None) -> None:
    """The snapshot must not reach into the turn the session holds (``turn``: its
    token; a dead one too, until sealed): the turn travels whole in the tail."""
    if turn is None:
        return
    cur.execute(queries["turn_in_snapshot"], {"id": sid, "turn": turn, "watermark": watermark})
    if cur.fetchone() is not None:
        raise TurnHeldError(sid, message=f"the snapshot of {sid!r} up to seq {watermark} reaches into an open turn")


def _fence(cur: Any, queries: Mapping[str, str], lease: Lease) -> float:
    """The fencing write; returns when the lease with this token was acquired."""
    cur.execute(
        queries["fence_lease"],
        {"session_id": lease.session_id, "holder": lease.holder, "token": lease.token},
    )
    row = cur.fetchone()
    if row is None:
        require_session(cur, queries, lease.session_id)  # unknown id: SessionNotFoundError
        raise LeaseLostError(lease.session_id, lease.holder, lease.token)
    hooks.point("after_fence", "commit_compaction")
    return float(row["acquired_at"])


def _end_parent(cur: Any, queries: Mapping[str, str], session_id: str) -> None:
    cur.execute(queries["end_for_compression"], {"id": session_id})
    if cur.fetchone() is None:  # cannot happen under the row lock; refuse rather than fork
        raise TranscriptError(f"session {session_id!r} ended during its own compaction commit")


def _create_child(
    cur: Any,
    queries: Mapping[str, str],
    child_id: str,
    parent_id: str,
    source: str,
    row_count: int,
    unique_violation: type[Exception],
) -> None:
    try:
        cur.execute(
            queries["insert_child"],
            {"id": child_id, "source": source, "parent_session_id": parent_id, "next_seq": row_count + 1},
        )
    except unique_violation as exc:
        raise SessionExistsError(child_id) from exc
