"""Turn leases on PostgreSQL: transaction bodies of a cursor, and the store methods
that run them (`TurnMethods`, mixed into `PostgresStore`).

A session row holds its turn lease (holder, token, expiry on the database clock,
the interrupt flag); tokens come from the ``turn_tokens`` sequence, so a token names
one turn of one database for good. Taking, renewing, closing and sealing a lease
update the session row, so they are ordered with appends by its row lock. A lease
that lapsed while held is a dead turn: it refuses every write until `seal_turn`
ends it. A keyed turn's key (``turn_keys``) says whether that turn completed, to
replay it rather than run it again.

Renewing, closing and sealing find the lease by its token. Under READ COMMITTED a
statement that waited for the row lock of a rotation's commit re-checks the row it
waited for, finds it ended and matches nothing, while the continuation the commit
created, which carries the lease now, is not in that statement's snapshot: so when
one matches nothing, a new statement looks for the continuation (`_on_carrier`).
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
    validate_session_id,
)
from protocol._checks import check_text
from protocol._turns import SealMode, seal_retractions

from .._rows import (
    check_open_turn,
    check_seal,
    check_ttl,
    check_turn,
    stored_message_from_row,
    turn_lease_from_row,
    turn_refusal,
)
from ..sql._lineage import ended_error, require_incarnation, require_session, resolve_tip
from ._lineage import lock_live_tip

__all__ = [
    "TurnMethods",
    "close_turn",
    "current_turn",
    "interrupt_turn",
    "interrupted_turns",
    "live_turns",
    "open_turn",
    "renew_turn",
    "seal_turn",
    "turn_held",
    "turn_refusing",
]

Queries = Mapping[str, str]

# How many rotations one renew, close or seal follows before it gives up on the lease
# (each round is a rotation committing while the statement waited for its row lock).
_MAX_CARRIER_ROUNDS = 8


def turn_held(
    cur: Any, q: Queries, session_id: str, turn: int | None = None
) -> TurnHeldError | TurnLostError | SessionNotFoundError:
    """The error for a write refused by the turn lease: the session holds a dead turn,
    another holder's is live, or (``turn``: the token the write carried) that turn's
    lease is not (`turn_refusal`)."""
    cur.execute(q["turn_of"], {"id": session_id})
    row = cur.fetchone()
    if row is None:
        return SessionNotFoundError(session_id)
    return turn_refusal(session_id, row, live=row["turn_live"], turn=turn)


def turn_refusing(
    cur: Any, q: Queries, session_id: str, turn: int | None = None
) -> TurnHeldError | TurnLostError | SessionNotFoundError | None:
    """`turn_held`'s error if the turn lease refuses a write carrying ``turn`` now (the
    batch statement's own test, on the database clock), else None."""
    cur.execute(q["turn_of"], {"id": session_id})
    row = cur.fetchone()
    if row is None:
        return SessionNotFoundError(session_id)
    live = row["turn_live"]
    # a write without a token needs no turn held (a dead one admits nobody)
    allowed = row["turn_holder"] is None if turn is None else live and row["turn_token"] == turn
    return None if allowed else turn_refusal(session_id, row, live=live, turn=turn)


def open_turn(
    cur: Any,
    q: Queries,
    session_id: str,
    holder: str,
    ttl_s: float,
    incarnation: str | None = None,
    rollback: int | None = None,
    key: str | None = None,
) -> TurnLease:
    """Take the turn lease of live session ``session_id``; with ``rollback`` (the token
    of the turn this one replaces), retract that turn's messages still at the end of
    the live transcript. With ``key``, the key names the turn opened, unless its last
    turn completed (`TurnReplayedError`), is live (`TurnHeldError`) or dead
    (`DeadTurnError`)."""
    claimed = None if key is None else _reusable_key(cur, q, session_id, incarnation, key)
    params = {"id": session_id, "holder": holder, "ttl": ttl_s, "incarnation": incarnation}
    cur.execute(q["open_turn"], params)
    row = cur.fetchone()
    if row is None:  # unknown, another incarnation, ended, or another holder's live turn
        session = require_incarnation(cur, q, session_id, incarnation)
        if session["ended_at"] is not None:
            raise ended_error(cur, q, session_id)
        raise turn_held(cur, q, session_id)
    if claimed is not None:
        conversation, seen = claimed
        cur.execute(
            q["claim_turn_key"], {"incarnation": conversation, "key": key, "token": row["turn_token"], "seen": seen}
        )
        if cur.fetchone() is None:  # claimed by another transaction meanwhile: why it stands
            assert key is not None
            _reusable_key(cur, q, session_id, incarnation, key)
            held = TurnHeldError(session_id, message=f"the turn with key {key!r} on {session_id!r} is open")
            held.key = key
            raise held
    rolled_back = 0
    if rollback is not None:
        cur.execute(q["roll_back_turn"], {"id": session_id, "token": rollback})
        rolled_back = cur.rowcount
    return turn_lease_from_row(row, rolled_back=rolled_back)


def _reusable_key(cur: Any, q: Queries, session_id: str, incarnation: str | None, key: str) -> tuple[str, int | None]:
    """The conversation and the token ``key`` names in it now (None: a new key; its
    row locked until COMMIT), if a turn may open under it: its last turn was sealed,
    or dropped unclosed (replaced: no live session holds it). Raises
    `TurnReplayedError` for a completed turn, `TurnHeldError` for a live one and
    `DeadTurnError` for a dead one."""
    conversation = require_incarnation(cur, q, session_id, incarnation)["incarnation"]
    cur.execute(q["turn_key"], {"incarnation": conversation, "key": key})
    claim = cur.fetchone()
    if claim is None:
        return conversation, None
    token = int(claim["token"])
    if claim["state"] == "completed":
        cur.execute(q["turn_replay"], {"id": session_id, "token": token})
        raise TurnReplayedError(session_id, key, [stored_message_from_row(r) for r in cur.fetchall()])
    if claim["state"] == "open":
        cur.execute(q["turn_carrier"], {"token": token, "holder": None, "live": False})
        carrier = cur.fetchone()
        if carrier is not None:
            args = (session_id, carrier["turn_holder"], carrier["turn_expires_at"], token)
            if not carrier["turn_live"]:
                raise DeadTurnError(*args)
            held = TurnHeldError(*args)
            held.key = key  # turn K itself: the caller waits for it, never interrupts it
            raise held
    return conversation, token


def _on_carrier(cur: Any, q: Queries, query: str, params: dict[str, Any], lease: TurnLease, live: bool) -> Any:
    """Run ``query`` (an UPDATE or locking SELECT of the session row carrying
    ``lease``) and return its row; when it matches nothing while a live session
    carries the lease (``live``: a live lease), again, in a new statement: the
    statement waited for a rotation's commit that ended its row and carried the
    lease to a continuation it could not see. None when no session carries it."""
    for _ in range(_MAX_CARRIER_ROUNDS):
        cur.execute(q[query], params)
        row = cur.fetchone()
        if row is not None:
            return row
        cur.execute(q["turn_carrier"], {"token": lease.token, "holder": lease.holder, "live": live})
        if cur.fetchone() is None:
            return None
    return None


def renew_turn(cur: Any, q: Queries, lease: TurnLease, ttl_s: float) -> TurnLease | None:
    params = {"token": lease.token, "holder": lease.holder, "ttl": ttl_s}
    row = _on_carrier(cur, q, "renew_turn", params, lease, live=True)
    return None if row is None else turn_lease_from_row(row)


def close_turn(cur: Any, q: Queries, lease: TurnLease) -> bool:
    """Release the lease (a keyed turn is completed with it); on COMMIT, NOTIFY
    registries holding calls behind it."""
    row = _on_carrier(cur, q, "close_turn", {"token": lease.token, "holder": lease.holder}, lease, live=False)
    if row is None:
        return False
    cur.execute(q["complete_turn_key"], {"token": lease.token})
    cur.execute(q["notify_turn_closed"], {"id": row["id"]})
    return True


def seal_turn(cur: Any, q: Queries, session_id: str, mode: str, lease: TurnLease | None) -> int | None:
    """Seal the dead turn of ``session_id``'s live tip (``lease`` None) or the turn
    ``lease`` names, wherever it lives now, under its session's row lock: retract its
    trailing rows per ``mode`` (`seal_retractions`), release its lease, mark its key
    sealed and (on COMMIT) NOTIFY registries holding calls behind it; the number of
    rows retracted, or None when there is no such turn (nothing written)."""
    if lease is None:
        found = _dead_turn(cur, q, session_id)
        if found is None:
            return None
        where, token = found
    else:
        require_session(cur, q, session_id)
        params = {"token": lease.token, "holder": lease.holder}
        row = _on_carrier(cur, q, "lock_turn_carrier", params, lease, live=False)
        if row is None:
            return None  # closed, sealed or replaced: no longer any live session's
        where, token = row["id"], lease.token
    cur.execute(q["turn_transcript"], {"id": where})
    rows = cur.fetchall()
    chosen = seal_retractions([stored_message_from_row(r) for r in rows], [r["turn"] == token for r in rows], mode)
    retracted = 0
    if chosen:
        cur.execute(q["retract_rows"], {"ids": [rows[i]["id"] for i in chosen]})
        retracted = cur.rowcount
    cur.execute(q["seal_turn"], {"id": where, "token": token})
    cur.execute(q["seal_turn_key"], {"token": token})
    cur.execute(q["notify_turn_closed"], {"id": where})
    return retracted


def _dead_turn(cur: Any, q: Queries, session_id: str) -> tuple[str, int] | None:
    """The live tip of ``session_id`` and the token of its dead turn, the tip's row
    locked; None when it holds none (no turn, or a live one)."""
    row = lock_live_tip(cur, q, session_id)  # a rotation meanwhile: its continuation carries the turn
    if row["turn_holder"] is None or row["turn_live"]:
        return None
    return row["id"], int(row["turn_token"])


def interrupt_turn(cur: Any, q: Queries, session_id: str) -> bool:
    """Flag the live turn of ``session_id``'s live tip; False when none is open."""
    tip = resolve_tip(cur, q, session_id)["id"]
    cur.execute(q["interrupt_turn"], {"id": tip})
    return cur.fetchone() is not None


def current_turn(cur: Any, q: Queries, session_id: str) -> TurnLease | None:
    """The live turn lease on ``session_id`` (the row itself), with the seq of its
    first live message."""
    cur.execute(q["turn_of"], {"id": session_id})
    row = cur.fetchone()
    if row is None or not row["turn_live"] or row["ended_at"] is not None:
        return None
    cur.execute(q["turn_first_seq"], {"id": session_id, "token": row["turn_token"]})
    first = cur.fetchone()
    seq = first["first_seq"]
    return turn_lease_from_row(row, first_seq=None if seq is None else int(seq), key=first["key"])


def live_turns(cur: Any, q: Queries, holder: str | None) -> list[TurnLease]:
    cur.execute(q["live_turns"], {"holder": holder})
    return [turn_lease_from_row(r) for r in cur.fetchall()]


def interrupted_turns(cur: Any, q: Queries, holder: str) -> list[TurnLease]:
    cur.execute(q["interrupted_turns"], {"holder": holder})
    return [turn_lease_from_row(r) for r in cur.fetchall()]


class TurnMethods:
    """The turn-lease methods of `PostgresStore` (see `Store.open_turn`)."""

    if TYPE_CHECKING:
        _q: Queries

        def _read(self, what: str, work: Any) -> Any: ...
        def _write(self, what: str, work: Any) -> Any: ...

    def open_turn(
        self,
        session_id: str,
        holder: str,
        ttl_s: float,
        *,
        incarnation: str | None = None,
        rollback: int | None = None,
        key: str | None = None,
    ) -> TurnLease:
        sid = validate_session_id(session_id)
        ttl = check_open_turn(holder, ttl_s, incarnation, rollback, key)
        return self._write(
            "open_turn", lambda cur: open_turn(cur, self._q, sid, holder, ttl, incarnation, rollback, key)
        )

    def seal_turn(self, session_id: str, *, mode: SealMode = "seal", lease: TurnLease | None = None) -> int | None:
        sid = validate_session_id(session_id)
        check_seal(mode, lease)
        return self._write("seal_turn", lambda cur: seal_turn(cur, self._q, sid, mode, lease))

    def renew_turn(self, lease: TurnLease, ttl_s: float) -> TurnLease | None:
        check_turn(lease)
        ttl = check_ttl(ttl_s)
        return self._write("renew_turn", lambda cur: renew_turn(cur, self._q, lease, ttl))

    def close_turn(self, lease: TurnLease) -> bool:
        check_turn(lease)
        return self._write("close_turn", lambda cur: close_turn(cur, self._q, lease))

    def interrupt_turn(self, session_id: str) -> bool:
        sid = validate_session_id(session_id)
        return self._write("interrupt_turn", lambda cur: interrupt_turn(cur, self._q, sid))

    def current_turn(self, session_id: str) -> TurnLease | None:
        sid = validate_session_id(session_id)
        return self._read("current_turn", lambda cur: current_turn(cur, self._q, sid))

    def turns(self, *, holder: str | None = None) -> list[TurnLease]:
        if holder is not None:
            check_text(holder, "holder")
        return self._read("turns", lambda cur: live_turns(cur, self._q, holder))

    def interrupted_turns(self, holder: str) -> list[TurnLease]:
        check_text(holder, "holder")
        return self._read("interrupted_turns", lambda cur: interrupted_turns(cur, self._q, holder))
