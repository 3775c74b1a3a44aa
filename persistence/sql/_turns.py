"""Turn leases: the transaction bodies of the turn operations, the same for every dialect.

A session row holds its turn lease (holder, token, expiry, the interrupt flag);
a token names one turn of one store for good (`Dialect.new_turn_token`). A lease
that lapsed while held is a dead turn: it refuses every write until `seal_turn`
ends it. A keyed turn's key (``turn_keys``) says whether that turn completed, to
replay it rather than run it again. Times are the dialect's (``now``: its clock,
None where each statement reads the server's).

Renewing, closing and sealing find the lease by its token. Where a statement that
waited for the row lock of a rotation's commit re-checks the row it waited for, it
finds it ended and matches nothing while the continuation the commit created (which
carries the lease now) is not in its snapshot: so when one matches nothing, a new
statement looks for the continuation, up to `Dialect.carrier_rounds` times
(`_on_carrier`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from protocol import (
    DeadTurnError,
    SessionNotFoundError,
    TurnHeldError,
    TurnLease,
    TurnLostError,
    TurnReplayedError,
)
from protocol._turns import seal_retractions

from .._rows import stored_message_from_row, turn_lease_from_row, turn_refusal
from ._lineage import ended_error, require_incarnation, require_session, resolve_tip

if TYPE_CHECKING:
    from ._dialect import Cursor, Dialect

__all__ = [
    "close_turn",
    "current_turn",
    "interrupt_turn",
    "interrupted_turns",
    "live_turns",
    "open_turn",
    "renew_turn",
    "seal_turn",
    "turn_held",
    "turn_keyed",
]

Queries = Mapping[str, str]


def turn_held(
    cur: Cursor, q: Queries, session_id: str, turn: int | None = None, now: float | None = None
) -> TurnHeldError | TurnLostError | SessionNotFoundError:
    """The error for a write refused by the turn lease (at ``now``): the session holds
    a dead turn, another holder's is live, or (``turn``: the token the write carried)
    that turn's lease is not (`turn_refusal`)."""
    row = cur.execute(q["turn_of"], {"session_id": session_id, "now": now}).fetchone()
    if row is None:
        return SessionNotFoundError(session_id)
    return turn_refusal(session_id, row, live=bool(row["turn_live"]), turn=turn)


def open_turn(
    cur: Cursor,
    dialect: Dialect,
    session_id: str,
    holder: str,
    ttl: float,
    incarnation: str | None = None,
    rollback: int | None = None,
    key: str | None = None,
) -> TurnLease:
    """Take the turn lease of live session ``session_id``; with ``rollback`` (the token
    of the turn this one replaces), retract that turn's messages still at the end of
    the live transcript (archived, as every retract). With ``key``, the key names the
    turn opened, unless its last turn completed (`TurnReplayedError`), is live
    (`TurnHeldError`) or dead (`DeadTurnError`)."""
    q, now = dialect.queries, dialect.clock()
    claimed = None if key is None else _reusable_key(cur, q, session_id, incarnation, key, now)
    params = {
        "session_id": session_id,
        "holder": holder,
        "token": dialect.new_turn_token(cur),
        "ttl": ttl,
        "now": now,
        "incarnation": incarnation,
    }
    row = cur.execute(q["open_turn"], params).fetchone()
    if row is None:  # unknown, another incarnation, ended, or another holder's live turn
        session = require_incarnation(cur, q, session_id, incarnation)
        if session["ended_at"] is not None:
            raise ended_error(cur, q, session_id)
        raise turn_held(cur, q, session_id, now=now)
    if claimed is not None:
        assert key is not None
        conversation, seen = claimed
        claim = {"incarnation": conversation, "key": key, "token": row["turn_token"], "now": now, "seen": seen}
        if cur.execute(q["claim_turn_key"], claim).rowcount != 1:  # claimed meanwhile: why it stands
            _reusable_key(cur, q, session_id, incarnation, key, now)
            held = TurnHeldError(session_id, message=f"the turn with key {key!r} on {session_id!r} is open")
            held.key = key
            raise held
    rolled_back = 0
    if rollback is not None:
        rolled_back = cur.execute(
            q["roll_back_turn"], {"session_id": session_id, "token": rollback, "now": now}
        ).rowcount
    return turn_lease_from_row(row, rolled_back=rolled_back)


def _reusable_key(
    cur: Cursor, q: Queries, session_id: str, incarnation: str | None, key: str, now: float | None
) -> tuple[str, int | None]:
    """The conversation and the token ``key`` names in it now (None: a new key), if a
    turn may open under it: its last turn was sealed, or dropped unclosed (replaced:
    no live session holds it). Raises `TurnReplayedError` for a completed turn,
    `TurnHeldError` for a live one and `DeadTurnError` for a dead one."""
    conversation = require_incarnation(cur, q, session_id, incarnation)["incarnation"]
    claim = cur.execute(q["turn_key"], {"incarnation": conversation, "key": key}).fetchone()
    if claim is None:
        return conversation, None
    token = int(claim["token"])
    if claim["state"] == "completed":
        rows = cur.execute(q["turn_replay"], {"session_id": session_id, "token": token}).fetchall()
        raise TurnReplayedError(session_id, key, [stored_message_from_row(r) for r in rows])
    if claim["state"] == "open":
        carrier = cur.execute(q["turn_carrier"], {"token": token, "holder": None, "live": False, "now": now}).fetchone()
        if carrier is not None:
            args = (session_id, carrier["turn_holder"], carrier["turn_expires_at"], token)
            if not carrier["turn_live"]:
                raise DeadTurnError(*args)
            held = TurnHeldError(*args)
            held.key = key  # turn K itself: the caller waits for it, never interrupts it
            raise held
    return conversation, token


def _on_carrier(cur: Cursor, dialect: Dialect, query: str, params: dict[str, Any], lease: TurnLease, live: bool) -> Any:
    """Run ``query`` (an UPDATE or locking SELECT of the session row carrying
    ``lease``) and return its row; when it matches nothing while a live session
    carries the lease (``live``: a live lease), again, in a new statement (see the
    module docstring). None when no session carries it."""
    q = dialect.queries
    look = {"token": lease.token, "holder": lease.holder, "live": live, "now": params["now"]}
    for round_ in range(dialect.carrier_rounds):
        row = cur.execute(q[query], params).fetchone()
        if row is not None:
            return row
        if round_ + 1 == dialect.carrier_rounds or cur.execute(q["turn_carrier"], look).fetchone() is None:
            return None
    return None


def _lease_params(dialect: Dialect, lease: TurnLease) -> dict[str, Any]:
    return {"token": lease.token, "holder": lease.holder, "now": dialect.clock()}


def renew_turn(cur: Cursor, dialect: Dialect, lease: TurnLease, ttl: float) -> TurnLease | None:
    row = _on_carrier(cur, dialect, "renew_turn", {**_lease_params(dialect, lease), "ttl": ttl}, lease, live=True)
    return None if row is None else turn_lease_from_row(row)


def close_turn(cur: Cursor, dialect: Dialect, lease: TurnLease) -> bool:
    """Release the lease (a keyed turn is completed with it); the dialect then tells
    whoever waits for the turn (`Dialect.turn_closed`)."""
    row = _on_carrier(cur, dialect, "close_turn", _lease_params(dialect, lease), lease, live=False)
    if row is None:
        return False
    cur.execute(dialect.queries["complete_turn_key"], {"token": lease.token})
    dialect.turn_closed(cur, row["id"])
    return True


def turn_keyed(cur: Cursor, dialect: Dialect, token: int) -> bool:
    """Whether the turn of lease ``token`` is an open keyed turn (its close completes the key)."""
    return cur.execute(dialect.queries["turn_key_open"], {"token": token}).fetchone() is not None


def seal_turn(cur: Cursor, dialect: Dialect, session_id: str, mode: str, lease: TurnLease | None) -> int | None:
    """Seal the dead turn of ``session_id``'s live tip (``lease`` None) or the turn
    ``lease`` names, wherever it lives now, its session row locked: retract its
    trailing rows per ``mode`` (`seal_retractions`), release its lease, mark its key
    sealed and tell whoever waits for it; the number of rows retracted, or None when
    there is no such turn (nothing written)."""
    q, now = dialect.queries, dialect.clock()
    if lease is None:
        found = _dead_turn(cur, dialect, session_id, now)
        if found is None:
            return None
        where, token = found
    else:
        require_session(cur, q, session_id)
        row = _on_carrier(cur, dialect, "lock_turn_carrier", _lease_params(dialect, lease), lease, live=False)
        if row is None:
            return None  # closed, sealed or replaced: no longer any live session's
        where, token = row["id"], lease.token
    rows = cur.execute(q["turn_transcript"], {"session_id": where}).fetchall()
    chosen = seal_retractions([stored_message_from_row(r) for r in rows], [r["turn"] == token for r in rows], mode)
    retracted = 0
    if chosen:
        ids = dialect.id_list([rows[i]["id"] for i in chosen])
        retracted = cur.execute(q["retract_rows"], {"ids": ids, "now": now}).rowcount
    cur.execute(q["seal_turn"], {"session_id": where, "token": token, "now": now})
    cur.execute(q["seal_turn_key"], {"token": token})
    dialect.turn_closed(cur, where)
    return int(retracted)


def _dead_turn(cur: Cursor, dialect: Dialect, session_id: str, now: float | None) -> tuple[str, int] | None:
    """The live tip of ``session_id`` and the token of its dead turn, the tip's row
    locked; None when it holds none (no turn, or a live one)."""
    tip = dialect.lock_live_tip(cur, session_id)["id"]  # a rotation meanwhile: its continuation carries the turn
    row = cur.execute(dialect.queries["turn_of"], {"session_id": tip, "now": now}).fetchone()
    if row["turn_holder"] is None or row["turn_live"]:
        return None
    return tip, int(row["turn_token"])


def interrupt_turn(cur: Cursor, dialect: Dialect, session_id: str) -> bool:
    """Flag the live turn of ``session_id``'s live tip; False when none is open."""
    tip = resolve_tip(cur, dialect.queries, session_id)["id"]
    params = {"session_id": tip, "now": dialect.clock()}
    return cur.execute(dialect.queries["interrupt_turn"], params).fetchone() is not None


def current_turn(cur: Cursor, dialect: Dialect, session_id: str) -> TurnLease | None:
    """The live turn lease on ``session_id`` (the row itself, not its tip), with the
    seq of its first live message."""
    q = dialect.queries
    row = cur.execute(q["turn_of"], {"session_id": session_id, "now": dialect.clock()}).fetchone()
    if row is None or not row["turn_live"] or row["ended_at"] is not None:
        return None
    first = cur.execute(q["turn_first_seq"], {"session_id": session_id, "token": row["turn_token"]}).fetchone()
    seq = first["first_seq"]
    return turn_lease_from_row(row, first_seq=None if seq is None else int(seq), key=first["key"])


def live_turns(cur: Cursor, dialect: Dialect, holder: str | None) -> list[TurnLease]:
    rows = cur.execute(dialect.queries["live_turns"], {"holder": holder, "now": dialect.clock()}).fetchall()
    return [turn_lease_from_row(r) for r in rows]


def interrupted_turns(cur: Cursor, dialect: Dialect, holder: str) -> list[TurnLease]:
    return [turn_lease_from_row(r) for r in cur.execute(dialect.queries["interrupted_turns"], {"holder": holder})]
