"""The session operations of a `SqlStore`, written once over a `Dialect`: creating,
reading, listing, ending, erasing, expiring and branching sessions.

`SqlStore` extends `SessionOperations` with the operations on a session's messages,
leases, turns, compactions and cooldowns; this class holds what they all run on.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import SessionInfo
from protocol._checks import check_text

from .._branch import check_branch
from .._expiry import check_expire, expire_lineages
from .._metadata import check_listing, check_metadata, check_metadata_patch, check_older_than
from .._rows import check_new_sessions, checked_session_id, new_incarnation, session_from_row
from . import _branch as branching
from . import _lifecycle as lifecycle
from . import _sessions as rows
from ._dialect import Cursor, Dialect
from ._lineage import first_row, resolve_tip

__all__ = ["SessionOperations"]

logger = logging.getLogger("session_actors.store")


class SessionOperations:
    """The session operations of a `Store` over ``dialect`` (see the module docstring)."""

    def __init__(self, dialect: Dialect, *, max_content_bytes: int | None = None) -> None:
        self._dialect = dialect
        self._q = dialect.queries
        self._max_content_bytes = max_content_bytes  # per message (None: the protocol's limit)

    # -- sessions ---------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        source: str = "api",
        parent_session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        sid = checked_session_id(session_id)
        parent = None if parent_session_id is None else checked_session_id(parent_session_id)
        check_text(source, "source")
        text = check_metadata(metadata)
        if parent is None:  # a plain create may share the dialect's group commit
            row = self._dialect.grouped_create(sid, source, text, new_incarnation())
            if row is not None:
                return session_from_row(row)

        def work(c: Cursor) -> Any:
            return rows.create_session(c, self._dialect, sid, source, parent, text)

        return session_from_row(self._dialect.write("create_session", sid, work))

    def create_sessions(
        self, session_ids: Sequence[str], *, source: str = "api", metadata: Mapping[str, Any] | None = None
    ) -> list[SessionInfo]:
        ids, text = check_new_sessions(session_ids, source, metadata)
        if not ids:
            return []
        created = self._dialect.write(
            "create_sessions", ids[0], lambda c: rows.create_sessions(c, self._dialect, ids, source, text)
        )
        return [session_from_row(row) for row in created]

    def get_session(self, session_id: str) -> SessionInfo | None:
        sid = checked_session_id(session_id)
        row = self._dialect.read("get_session", sid, lambda c: first_row(c, self._q, "get_session", session_id=sid))
        return None if row is None else session_from_row(row)

    def end_session(self, session_id: str, reason: str) -> SessionInfo:
        sid = checked_session_id(session_id)
        check_text(reason, "reason")

        def work(c: Cursor) -> Any:
            return lifecycle.end_session(c, self._q, sid, reason, self._dialect.clock())

        return session_from_row(self._dialect.write("end_session", sid, work))

    def sessions(
        self,
        *,
        live: bool | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        after: SessionInfo | str | None = None,
        limit: int | None = None,
    ) -> list[SessionInfo]:
        args = check_listing(live, source, metadata, after, limit)
        if isinstance(args.after, str):
            checked_session_id(args.after)
        rows = self._dialect.read("sessions", "?", lambda c: lifecycle.list_sessions(c, self._q, args))
        return [session_from_row(r) for r in rows]

    def update_metadata(self, session_id: str, patch: Mapping[str, Any]) -> SessionInfo:
        sid = checked_session_id(session_id)
        merged = check_metadata_patch(patch)

        def work(c: Cursor) -> Any:
            return lifecycle.update_metadata(c, self._q, sid, merged)

        return session_from_row(self._dialect.write("update_metadata", sid, work))

    def delete_session(self, session_id: str) -> int:
        sid = checked_session_id(session_id)
        erased = self._dialect.write("delete_session", sid, lambda c: lifecycle.erase_lineage(c, self._dialect, sid))
        logger.info("erased the lineage of %s: %d messages", sid, erased)
        return erased

    def prune_archive(self, *, older_than_s: float, session_id: str | None = None) -> int:
        older_than = check_older_than(older_than_s)
        sid = None if session_id is None else checked_session_id(session_id)

        def work(c: Cursor) -> Any:
            return lifecycle.prune(c, self._dialect, older_than=older_than, session_id=sid)

        return self._dialect.write("prune_archive", sid or "?", work)

    def expire(
        self,
        idle_for_s: float,
        *,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        args = check_expire(idle_for_s, source, metadata, dry_run)
        dialect, idle_for = self._dialect, args.idle_for
        idle = dialect.read(
            "expire", "?", lambda c: lifecycle.idle_lineages(c, dialect, idle_for=idle_for, source=args.source)
        )
        return expire_lineages(
            args,
            idle,
            lambda: self.sessions(source=args.source, metadata=args.metadata),
            lambda root: dialect.write(
                "expire", root, lambda c: lifecycle.expire_lineage(c, dialect, root, idle_for=idle_for)
            ),
        )

    def branch(
        self, session_id: str, at_seq: int, new_id: str, *, metadata: Mapping[str, Any] | None = None
    ) -> SessionInfo:
        sid, seq, new, text = check_branch(session_id, at_seq, new_id, metadata)
        row = self._dialect.write("branch", new, lambda c: branching.branch(c, self._dialect, sid, seq, new, text))
        return session_from_row(row)

    def children(self, session_id: str) -> list[SessionInfo]:
        sid = checked_session_id(session_id)

        rows = self._dialect.read("children", sid, lambda c: branching.children(c, self._dialect, sid))
        return [session_from_row(r) for r in rows]

    def resolve(self, session_id: str) -> str:
        sid = checked_session_id(session_id)
        return self._dialect.read("resolve", sid, lambda c: str(resolve_tip(c, self._q, sid)["id"]))
