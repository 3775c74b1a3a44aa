"""Branches, shared by every backend: `Store.branch`'s checks and the rows a branch
copies."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from protocol import InvalidArgumentError, StoredMessage
from protocol._checks import check_count
from protocol._transcript import invalid_tool_pairing

from ._metadata import check_metadata
from ._rows import checked_session_id

__all__ = ["COPIED", "check_branch", "copied_rows"]

#: What a branch copies of each message: its content, never its place (seq, turn,
#: origin) or its idempotency key (the branch is another conversation).
COPIED = ("role", "content", "name", "tool_call_id", "tool_calls", "meta")


def check_branch(
    session_id: object, at_seq: object, new_id: object, metadata: object
) -> tuple[str, int, str, str | None]:
    """The checked arguments; the metadata as JSON text (None: the session's own)."""
    sid, new = checked_session_id(session_id), checked_session_id(new_id)
    if sid == new:
        raise InvalidArgumentError(f"a branch needs a new id, got {new!r} for both")
    seq = check_count(at_seq, "at_seq", minimum=1, maximum=2**63 - 1)
    return sid, seq, new, None if metadata is None else check_metadata(metadata)


def copied_rows(
    session_id: str, at_seq: int, live: Sequence[StoredMessage], rows: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The columns of the live rows up to ``at_seq`` (``rows``, as the database gave
    ``live``), checked: ``at_seq`` is a live message of the session and the prefix
    does not cut a tool call from its result."""
    if at_seq not in {m.seq for m in live}:
        raise InvalidArgumentError(f"seq {at_seq} is not a live message of {session_id!r}")
    prefix = [m for m in live if m.seq <= at_seq]
    broken = invalid_tool_pairing(prefix, live)
    if broken is not None:
        raise InvalidArgumentError(f"a branch of {session_id!r} at seq {at_seq} would cut a tool run: {broken}")
    return [{k: r[k] for k in COPIED} for r in rows if r["seq"] <= at_seq]
