"""Compaction leases: the transaction bodies of the lease operations, every dialect's.

A lease row names its session, holder and fencing token; times are the dialect's
(``now``: its clock, None where each statement reads the server's).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol import Lease

from .._rows import lease_from_row
from ._lineage import existing, first_row, require_session

if TYPE_CHECKING:
    from ._dialect import Cursor, Dialect

__all__ = ["acquire_lease", "current_lease", "held_leases", "reap_leases", "release_lease", "renew_lease"]


def current_lease(cur: Cursor, dialect: Dialect, session_id: str) -> Lease | None:
    """The lease live on ``session_id`` now, if any."""
    require_session(cur, dialect.queries, session_id)
    row = first_row(cur, dialect.queries, "current_lease", session_id=session_id, now=dialect.clock())
    return None if row is None else lease_from_row(row)


def acquire_lease(cur: Cursor, dialect: Dialect, session_id: str, holder: str, ttl: float) -> Lease | None:
    """A new lease for ``holder``, unless another holder's is live (None)."""
    require_session(cur, dialect.queries, session_id)
    with existing(dialect, session_id):
        params = {"session_id": session_id, "holder": holder, "ttl": ttl, "now": dialect.clock()}
        row = first_row(cur, dialect.queries, "acquire_lease", **params)
    return None if row is None else lease_from_row(row)


def renew_lease(cur: Cursor, dialect: Dialect, lease: Lease, ttl: float) -> Lease | None:
    """``lease`` extended, if it is still live (an unknown session has no lease row:
    None, like any lost lease)."""
    row = first_row(cur, dialect.queries, "renew_lease", **_named(lease), ttl=ttl, now=dialect.clock())
    return None if row is None else lease_from_row(row)


def release_lease(cur: Cursor, dialect: Dialect, lease: Lease) -> bool:
    """End ``lease`` now; False when it was not live."""
    params = {**_named(lease), "now": dialect.clock()}
    return bool(cur.execute(dialect.queries["release_lease"], params).rowcount == 1)


def reap_leases(cur: Cursor, dialect: Dialect) -> int:
    """Delete the lapsed lease rows; how many."""
    return int(cur.execute(dialect.queries["reap_leases"], {"now": dialect.clock()}).rowcount)


def held_leases(cur: Cursor, dialect: Dialect) -> list[Lease]:
    """Every lease row held."""
    return [lease_from_row(r) for r in cur.execute(dialect.queries["held_leases"], {}).fetchall()]


def _named(lease: Lease) -> dict[str, Any]:
    return {"session_id": lease.session_id, "holder": lease.holder, "token": lease.token}
