"""Turn leases on SQLite: transaction bodies of an open connection, and the store
methods that run them (`TurnMethods`, mixed into `SqliteStore`).

A session row holds its turn lease (holder, token, expiry on the store's clock, the
interrupt flag). Tokens come from the file's one counter, so a token names one turn
of one store for good. A lease that lapsed while held is a dead turn: it refuses
every write until `seal_turn` ends it. A keyed turn's key (``turn_keys``) says
whether that turn completed, to replay it rather than run it again. Every body runs
in the writer's transaction: the write lock is held, so a check and the write it
guards see the same rows.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar

from protocol import (
    END_REASON_COMPRESSION,
    DeadTurnError,
    SessionEndedError,
    TurnHeldError,
    TurnLease,
    TurnReplayedError,
)
from protocol._checks import check_text
from protocol._turns import SealMode, seal_retractions

from .._rows import (
    check_open_turn,
    check_seal,
    check_ttl,
    check_turn,
    checked_session_id,
    stored_message_from_row,
    turn_lease_from_row,
)
from ..sql._lineage import ended_error, require_incarnation, require_session, resolve_tip
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
    "seal_turn",
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
    key: str | None = None,
) -> TurnLease:
    """Take the turn lease of live session ``session_id``; with ``rollback`` (the token
    of the turn this one replaces), retract that turn's messages still at the end of
    the live transcript (archived, as every retract). With ``key``, the key names the
    turn opened, unless its last turn completed (`TurnReplayedError`), is live
    (`TurnHeldError`) or dead (`DeadTurnError`)."""
    claimed = None if key is None else _reusable_key(conn, q, session_id, incarnation, key, now)
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
            raise ended_error(conn, q, session_id)
        raise turn_held(conn, q, session_id, now=now)
    if claimed is not None:
        conversation, seen = claimed
        claim = {"incarnation": conversation, "key": key, "token": token, "now": now, "seen": seen}
        if conn.execute(q["claim_turn_key"], claim).rowcount != 1:  # only a key's last turn is reused
            held = TurnHeldError(session_id, message=f"the turn with key {key!r} on {session_id!r} is open")
            held.key = key
            raise held
    rolled_back = 0
    if rollback is not None:
        params = {"session_id": session_id, "token": rollback, "now": now}
        rolled_back = conn.execute(q["roll_back_turn"], params).rowcount
    return turn_lease_from_row(row, rolled_back=rolled_back)


def _reusable_key(
    conn: sqlite3.Connection, q: Queries, session_id: str, incarnation: str | None, key: str, now: float
) -> tuple[str, int | None]:
    """The conversation and the token ``key`` names in it now (None: a new key), if a
    turn may open under it: its last turn was sealed, or dropped unclosed (replaced:
    no live session holds it). Raises `TurnReplayedError` for a completed turn,
    `TurnHeldError` for a live one and `DeadTurnError` for a dead one."""
    conversation = require_incarnation(conn, q, session_id, incarnation)["incarnation"]
    claim = conn.execute(q["turn_key"], {"incarnation": conversation, "key": key}).fetchone()
    if claim is None:
        return conversation, None
    token = claim["token"]
    if claim["state"] == "completed":
        rows = conn.execute(q["turn_replay"], {"session_id": session_id, "token": token})
        raise TurnReplayedError(session_id, key, [stored_message_from_row(r) for r in rows])
    if claim["state"] == "open":
        carrier = conn.execute(q["turn_carrier"], {"token": token, "holder": None}).fetchone()
        if carrier is not None:
            args = (session_id, carrier["turn_holder"], carrier["turn_expires_at"], token)
            if carrier["turn_expires_at"] <= now:
                raise DeadTurnError(*args)
            held = TurnHeldError(*args)
            held.key = key  # turn K itself: the caller waits for it, never interrupts it
            raise held
    return conversation, token


def seal_turn(
    conn: sqlite3.Connection, q: Queries, session_id: str, mode: str, lease: TurnLease | None, now: float
) -> int | None:
    """Seal the dead turn of ``session_id``'s live tip (``lease`` None) or the turn
    ``lease`` names, wherever it lives now: retract its trailing rows per ``mode``
    (`seal_retractions`), release its lease and mark its key sealed; the number of
    rows retracted, or None when there is no such turn (nothing written)."""
    if lease is None:
        tip = resolve_tip(conn, q, session_id)
        if tip["ended_at"] is not None and tip["end_reason"] != END_REASON_COMPRESSION:
            raise SessionEndedError(tip["id"], None, tip["end_reason"])
        if tip["turn_holder"] is None or tip["turn_expires_at"] > now:
            return None  # no turn, or a live one: not dead
        where, token = tip["id"], tip["turn_token"]
    else:
        require_session(conn, q, session_id)
        carrier = conn.execute(q["turn_carrier"], {"token": lease.token, "holder": lease.holder}).fetchone()
        if carrier is None:
            return None  # closed, sealed or replaced: no longer any live session's
        where, token = carrier["id"], lease.token
    rows = conn.execute(q["turn_transcript"], {"session_id": where}).fetchall()
    chosen = seal_retractions([stored_message_from_row(r) for r in rows], [r["turn"] == token for r in rows], mode)
    ids = json.dumps([rows[i]["id"] for i in chosen])
    retracted = conn.execute(q["retract_rows"], {"ids": ids, "now": now}).rowcount
    conn.execute(q["seal_turn"], {"session_id": where, "token": token, "now": now})
    conn.execute(q["seal_turn_key"], {"token": token})
    return retracted


def renew_turn(conn: sqlite3.Connection, q: Queries, lease: TurnLease, ttl_s: float, now: float) -> TurnLease | None:
    row = conn.execute(
        q["renew_turn"],
        {"token": lease.token, "holder": lease.holder, "expires_at": now + ttl_s, "now": now},
    ).fetchone()
    return None if row is None else turn_lease_from_row(row)


def close_turn(conn: sqlite3.Connection, q: Queries, lease: TurnLease, now: float) -> bool:
    """Release the lease; a keyed turn is completed with it."""
    if conn.execute(q["close_turn"], {"token": lease.token, "holder": lease.holder, "now": now}).rowcount != 1:
        return False
    conn.execute(q["complete_turn_key"], {"token": lease.token})
    return True


def interrupt_turn(conn: sqlite3.Connection, q: Queries, session_id: str, now: float) -> bool:
    """Flag the live turn of ``session_id``'s live tip; False when none is open."""
    live_id = resolve_tip(conn, q, session_id)["id"]
    return conn.execute(q["interrupt_turn"], {"session_id": live_id, "now": now}).fetchone() is not None


def current_turn(conn: sqlite3.Connection, q: Queries, session_id: str, now: float) -> TurnLease | None:
    """The live turn lease on ``session_id`` (the row itself, not its tip), with the
    seq of its first live message."""
    row = conn.execute(q["turn_of"], {"session_id": session_id}).fetchone()
    if row is None or row["turn_holder"] is None or row["turn_expires_at"] <= now or row["ended_at"] is not None:
        return None
    first = conn.execute(q["turn_first_seq"], {"session_id": session_id, "token": row["turn_token"]}).fetchone()
    return turn_lease_from_row(row, first_seq=first["first_seq"], key=first["key"])


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
        key: str | None = None,
    ) -> TurnLease:
        checked_session_id(session_id)
        ttl = check_open_turn(holder, ttl_s, incarnation, rollback, key)
        return self._write(
            lambda c: open_turn(c, self._q, session_id, holder, ttl, self.now(), incarnation, rollback, key),
            session_id,
            "open_turn",
        )

    def seal_turn(self, session_id: str, *, mode: SealMode = "seal", lease: TurnLease | None = None) -> int | None:
        checked_session_id(session_id)
        check_seal(mode, lease)
        return self._write(
            lambda c: seal_turn(c, self._q, session_id, mode, lease, self.now()), session_id, "seal_turn"
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
