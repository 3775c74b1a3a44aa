"""Turn leases on SQLite: transaction bodies of an open connection, and the store
methods that run them (`TurnMethods`, mixed into `SqliteStore`).

A session row holds its turn lease (holder, token, expiry on the store's clock, the
interrupt flag). Tokens come from the file's one counter, so a token names one turn
of one store for good. Every body runs in the writer's transaction: the write lock
is held, so a check and the write it guards see the same rows.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from protocol import TurnLease
from protocol._checks import check_text

from .._rows import check_open_turn, check_ttl, check_turn, checked_session_id, turn_lease_from_row
from ._lineage import ended_error, require_incarnation, resolve
from ._sessions import turn_held

__all__ = [
    "TurnMethods",
    "close_turn",
    "current_turn",
    "interrupt_turn",
    "interrupted_turns",
    "live_turns",
    "open_turn",
    "renew_turn",
]

Queries = Mapping[str, str]
Row = sqlite3.Row
T = TypeVar("T")


def open_turn(
    conn: sqlite3.Connection,
    q: Queries,
    session_id: str,
    holder: str,
    ttl_s: float,
    now: float,
    incarnation: str | None = None,
    rollback: int | None = None,
) -> TurnLease:
    """Take the turn lease of live session ``session_id``; with ``rollback`` (the token
    of the turn this one replaces), retract that turn's messages still at the end of
    the live transcript (archived, as every retract)."""
    token = conn.execute(q["next_turn_token"]).fetchone()["token"]
    row = conn.execute(
        q["open_turn"],
        {
            "session_id": session_id,
            "holder": holder,
            "token": token,
            "expires_at": now + ttl_s,
            "now": now,
            "incarnation": incarnation,
        },
    ).fetchone()
    if row is None:  # unknown, another incarnation, ended, or another holder's live turn
        session = require_incarnation(conn, q, session_id, incarnation)
        if session["ended_at"] is not None:
            raise ended_error(conn, q, session)
        raise turn_held(conn, q, session_id, now=now)
    rolled_back = 0
    if rollback is not None:
        params = {"session_id": session_id, "token": rollback, "now": now}
        rolled_back = conn.execute(q["roll_back_turn"], params).rowcount
    return turn_lease_from_row(row, rolled_back=rolled_back)


def renew_turn(conn: sqlite3.Connection, q: Queries, lease: TurnLease, ttl_s: float, now: float) -> TurnLease | None:
    row = conn.execute(
        q["renew_turn"],
        {"token": lease.token, "holder": lease.holder, "expires_at": now + ttl_s, "now": now},
    ).fetchone()
    return None if row is None else turn_lease_from_row(row)


def close_turn(conn: sqlite3.Connection, q: Queries, lease: TurnLease, now: float) -> bool:
    return conn.execute(q["close_turn"], {"token": lease.token, "holder": lease.holder, "now": now}).rowcount == 1


def interrupt_turn(conn: sqlite3.Connection, q: Queries, session_id: str, now: float) -> bool:
    """Flag the live turn of ``session_id``'s live tip; False when none is open."""
    live_id = resolve(conn, q, session_id)
    return conn.execute(q["interrupt_turn"], {"session_id": live_id, "now": now}).fetchone() is not None


def current_turn(conn: sqlite3.Connection, q: Queries, session_id: str, now: float) -> TurnLease | None:
    """The live turn lease on ``session_id`` (the row itself, not its tip), with the
    seq of its first live message."""
    row = conn.execute(q["turn_of"], {"session_id": session_id}).fetchone()
    if row is None or row["turn_holder"] is None or row["turn_expires_at"] <= now or row["ended_at"] is not None:
        return None
    first = conn.execute(q["turn_first_seq"], {"session_id": session_id, "token": row["turn_token"]}).fetchone()
    return turn_lease_from_row(row, first_seq=first["first_seq"])


def live_turns(conn: sqlite3.Connection, q: Queries, holder: str | None, now: float) -> list[TurnLease]:
    return [turn_lease_from_row(r) for r in conn.execute(q["live_turns"], {"holder": holder, "now": now})]


def interrupted_turns(conn: sqlite3.Connection, q: Queries, holder: str) -> list[TurnLease]:
    return [turn_lease_from_row(r) for r in conn.execute(q["interrupted_turns"], {"holder": holder})]


class TurnMethods:
    """The turn-lease methods of `SqliteStore` (see `Store.open_turn`)."""

    if TYPE_CHECKING:
        _q: Queries

        def now(self) -> float: ...
        def _read(self, fn: Callable[[sqlite3.Connection], T], session_id: str = "?") -> T: ...
        def _write(self, fn: Callable[[sqlite3.Connection], T], session_id: str = "?", what: str = "write") -> T: ...

    def open_turn(
        self,
        session_id: str,
        holder: str,
        ttl_s: float,
        *,
        incarnation: str | None = None,
        rollback: int | None = None,
    ) -> TurnLease:
        checked_session_id(session_id)
        ttl = check_open_turn(holder, ttl_s, incarnation, rollback)
        return self._write(
            lambda c: open_turn(c, self._q, session_id, holder, ttl, self.now(), incarnation, rollback),
            session_id,
            "open_turn",
        )

    def renew_turn(self, lease: TurnLease, ttl_s: float) -> TurnLease | None:
        check_turn(lease)
        ttl = check_ttl(ttl_s)
        return self._write(lambda c: renew_turn(c, self._q, lease, ttl, self.now()), lease.session_id, "renew")

    def close_turn(self, lease: TurnLease) -> bool:
        check_turn(lease)
        return self._write(lambda c: close_turn(c, self._q, lease, self.now()), lease.session_id, "close_turn")

    def interrupt_turn(self, session_id: str) -> bool:
        checked_session_id(session_id)
        return self._write(lambda c: interrupt_turn(c, self._q, session_id, self.now()), session_id, "interrupt_turn")

    def current_turn(self, session_id: str) -> TurnLease | None:
        checked_session_id(session_id)
        return self._read(lambda c: current_turn(c, self._q, session_id, self.now()), session_id)

    def turns(self, *, holder: str | None = None) -> list[TurnLease]:
        if holder is not None:
            check_text(holder, "holder")
        return self._read(lambda c: live_turns(c, self._q, holder, self.now()))

    def interrupted_turns(self, holder: str) -> list[TurnLease]:
        check_text(holder, "holder")
        return self._read(lambda c: interrupted_turns(c, self._q, holder))
