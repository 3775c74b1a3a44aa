"""Turn leases on PostgreSQL: transaction bodies of a cursor, and the store methods
that run them (`TurnMethods`, mixed into `PostgresStore`).

A session row holds its turn lease (holder, token, expiry on the database clock,
the interrupt flag); tokens come from the ``turn_tokens`` sequence, so a token names
one turn of one database for good. Taking, renewing and closing a lease update the
session row, so they are ordered with appends by its row lock.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from protocol import SessionNotFoundError, TurnHeldError, TurnLease, TurnLostError, validate_session_id
from protocol._checks import check_text

from .._rows import check_open_turn, check_ttl, check_turn, turn_lease_from_row, turn_refusal
from ._lineage import ended_error, require_incarnation, resolve_tip

__all__ = [
    "TurnMethods",
    "close_turn",
    "current_turn",
    "interrupt_turn",
    "interrupted_turns",
    "live_turns",
    "open_turn",
    "renew_turn",
    "turn_held",
    "turn_refusing",
]

Queries = Mapping[str, str]


def turn_held(
    cur: Any, q: Queries, session_id: str, turn: int | None = None
) -> TurnHeldError | TurnLostError | SessionNotFoundError:
    """The error for a write refused by the turn lease: another holder's is live, or
    (``turn``: the token the write carried) that turn's lease is not."""
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
    allowed = not live if turn is None else live and row["turn_token"] == turn
    return None if allowed else turn_refusal(session_id, row, live=live, turn=turn)


def open_turn(
    cur: Any,
    q: Queries,
    session_id: str,
    holder: str,
    ttl_s: float,
    incarnation: str | None = None,
    rollback: int | None = None,
) -> TurnLease:
    """Take the turn lease of live session ``session_id``; with ``rollback`` (the token
    of the turn this one replaces), retract that turn's messages still at the end of
    the live transcript."""
    params = {"id": session_id, "holder": holder, "ttl": ttl_s, "incarnation": incarnation}
    cur.execute(q["open_turn"], params)
    row = cur.fetchone()
    if row is None:  # unknown, another incarnation, ended, or another holder's live turn
        session = require_incarnation(cur, q, session_id, incarnation)
        if session["ended_at"] is not None:
            raise ended_error(cur, q, session_id)
        raise turn_held(cur, q, session_id)
    rolled_back = 0
    if rollback is not None:
        cur.execute(q["roll_back_turn"], {"id": session_id, "token": rollback})
        rolled_back = cur.rowcount
    return turn_lease_from_row(row, rolled_back=rolled_back)


def renew_turn(cur: Any, q: Queries, lease: TurnLease, ttl_s: float) -> TurnLease | None:
    cur.execute(q["renew_turn"], {"token": lease.token, "holder": lease.holder, "ttl": ttl_s})
    row = cur.fetchone()
    return None if row is None else turn_lease_from_row(row)


def close_turn(cur: Any, q: Queries, lease: TurnLease) -> bool:
    """Release the lease; on COMMIT, NOTIFY registries holding calls behind it."""
    cur.execute(q["close_turn"], {"token": lease.token, "holder": lease.holder})
    row = cur.fetchone()
    if row is None:
        return False
    cur.execute(q["notify_turn_closed"], {"id": row["id"]})
    return True


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
    first = cur.fetchone()["first_seq"]
    return turn_lease_from_row(row, first_seq=None if first is None else int(first))


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
    ) -> TurnLease:
        sid = validate_session_id(session_id)
        ttl = check_open_turn(holder, ttl_s, incarnation, rollback)
        return self._write("open_turn", lambda cur: open_turn(cur, self._q, sid, holder, ttl, incarnation, rollback))

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
