"""Messages, every dialect's: the job shape of an append, the answer of an empty
append, and the transcript and archive reads.

`SqlStore.append` checks an append on its caller's thread into an `AppendJob`, the
one shape both group-commit writers take.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from protocol import END_REASON_COMPRESSION, StoredMessage

from .._rows import stored_message_from_row
from ._lineage import ended_error, require_incarnation

if TYPE_CHECKING:
    from ._dialect import Cursor

__all__ = ["AppendJob", "new_job", "nothing_appended", "read_messages"]

Queries = Mapping[str, str]


class AppendJob(NamedTuple):
    """One append: checked column values (`_rows.message_params`) for ``session_id``'s
    next seqs (a tuple: one is built per append, on the caller's thread). A writer
    answers an unkeyed job with ``(first_seq, ids, created_at)``."""

    session_id: str
    params: Sequence[Mapping[str, Any]]
    incarnation: str | None = None  # the conversation meant (None: any)
    turn: int | None = None  # the token of the turn lease it is appended under
    keyed: bool = False  # a message carries an idempotency key: written alone, claiming its keys


#: ``new_job(AppendJob, (session_id, params, incarnation, turn, keyed))``: an
#: `AppendJob` without the named tuple's Python-level ``__new__`` (one per append).
new_job = tuple.__new__


def nothing_appended(cur: Cursor, q: Queries, session_id: str, incarnation: str | None) -> list[StoredMessage]:
    """An empty append writes nothing but answers like one: an unknown session, another
    incarnation or an ended session raise."""
    row = require_incarnation(cur, q, session_id, incarnation)
    if row["ended_at"] is not None:
        raise ended_error(cur, q, session_id)
    return []


def read_messages(
    cur: Cursor, q: Queries, query: str, session_id: str, incarnation: str | None, limit: int | None
) -> list[StoredMessage]:
    """The rows of named query ``query`` (live or archived messages) as stored messages,
    if ``session_id`` is the conversation ``incarnation`` and (meant) not rotated."""
    rows = cur.execute(q[query], {"session_id": session_id, "limit": limit})
    messages = [stored_message_from_row(r) for r in rows]  # a row at a time, never all rows at once
    # checked after the rows: a dialect's read may give each statement its own
    # snapshot, and an id erased and started again never gets its old incarnation back
    row = require_incarnation(cur, q, session_id, incarnation)
    if incarnation is not None and row["end_reason"] == END_REASON_COMPRESSION:
        raise ended_error(cur, q, session_id)  # rotated: the conversation lives on
    return messages
