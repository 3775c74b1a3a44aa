"""`SqlStore`: every `Store` operation written once, over a `Dialect`.

An operation checks its arguments (nothing is written before they pass), runs its
steps in one transaction of the dialect's, and maps the rows to protocol values.
The backends (`SqliteStore`, `PostgresStore`) open their dialect and hand it here.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from protocol import (
    END_REASON_COMPRESSION,
    CompactionDetail,
    CompactionNotFoundError,
    CompactionRecord,
    Cooldown,
    Lease,
    Message,
    SearchHit,
    SessionInfo,
    SessionNotFoundError,
    StoredMessage,
    TurnLease,
    Usage,
)
from protocol._checks import check_count, check_text
from protocol._records import CompactionMode
from protocol._turns import SealMode

from .. import _telemetry as telemetry
from .._branch import check_branch
from .._expiry import check_expire, expire_lineages
from .._metadata import (
    check_listing,
    check_metadata,
    check_metadata_patch,
    check_older_than,
    check_page_limit,
)
from .._recall import check_search
from .._rows import (
    check_commit_args,
    check_cooldown_error,
    check_cooldown_seconds,
    check_incarnation,
    check_lease,
    check_new_sessions,
    check_open_turn,
    check_seal,
    check_snapshot,
    check_ttl,
    check_turn,
    check_usage,
    checked_session_id,
    compaction_from_row,
    cooldown_from_row,
    lease_from_row,
    new_incarnation,
    other_incarnation,
    session_from_row,
    stored_message_from_row,
)
from .._usage import check_usage_scope
from . import _branch as branching
from . import _compaction as compaction
from . import _lifecycle as lifecycle
from . import _recall as recall
from . import _sessions as rows
from . import _turns as turning
from ._dialect import Cursor, Dialect
from ._lineage import ended_error, require_incarnation, require_session, resolve_tip

__all__ = ["SqlStore"]

logger = logging.getLogger("session_actors.store")


class SqlStore:
    """The operations of a `Store` over ``dialect`` (see the module docstring)."""

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

    def retract(
        self, session_id: str, *, incarnation: str | None = None, turn: TurnLease | None = None
    ) -> StoredMessage | None:
        sid = checked_session_id(session_id)
        check_incarnation(incarnation)
        token = None if turn is None else check_turn(turn)
        row = self._dialect.write(
            "retract", sid, lambda c: rows.retract_last(c, self._dialect, sid, incarnation, token)
        )
        return None if row is None else stored_message_from_row(row)

    def get_session(self, session_id: str) -> SessionInfo | None:
        sid = checked_session_id(session_id)
        row = self._dialect.read("get_session", sid, lambda c: self._one(c, "get_session", session_id=sid))
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

        def work(c: Cursor) -> list[SessionInfo]:
            require_session(c, self._q, sid)
            return [session_from_row(r) for r in c.execute(self._q["children"], {"session_id": sid}).fetchall()]

        return self._dialect.read("children", sid, work)

    def resolve(self, session_id: str) -> str:
        sid = checked_session_id(session_id)
        return self._dialect.read("resolve", sid, lambda c: str(resolve_tip(c, self._q, sid)["id"]))

    # -- messages ---------------------------------------------------------------

    @telemetry.traced_read("transcript")
    def transcript(
        self, session_id: str, *, incarnation: str | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        if check_page_limit(limit) is None:
            return self._messages("live_messages", session_id, incarnation)
        return self._messages("latest_live", session_id, incarnation, limit)[::-1]

    @telemetry.traced_read("archive")
    def archive(self, session_id: str, *, incarnation: str | None = None) -> list[StoredMessage]:
        return self._messages("archived_messages", session_id, incarnation)

    def _messages(
        self, query: str, session_id: str, incarnation: str | None, limit: int | None = None
    ) -> list[StoredMessage]:
        sid = checked_session_id(session_id)
        check_incarnation(incarnation)

        def work(c: Cursor) -> list[StoredMessage]:
            rows = c.execute(self._q[query], {"session_id": sid, "limit": limit})
            messages = [stored_message_from_row(r) for r in rows]  # a row at a time, never all rows at once
            # checked after the rows: a dialect's read may give each statement its own
            # snapshot, and an id erased and started again never gets its old incarnation back
            row = require_incarnation(c, self._q, sid, incarnation)
            if incarnation is not None and row["end_reason"] == END_REASON_COMPRESSION:
                raise ended_error(c, self._q, sid)  # rotated: the conversation lives on
            return messages

        return self._dialect.read(query, sid, work)

    # -- leases -----------------------------------------------------------------

    def current_lease(self, session_id: str) -> Lease | None:
        sid = checked_session_id(session_id)

        def work(c: Cursor) -> Any:
            require_session(c, self._q, sid)
            return self._one(c, "current_lease", session_id=sid, now=self._dialect.clock())

        row = self._dialect.read("current_lease", sid, work)
        return None if row is None else lease_from_row(row)

    def acquire_lease(self, session_id: str, holder: str, ttl_s: float) -> Lease | None:
        sid = checked_session_id(session_id)
        check_text(holder, "holder")
        ttl = check_ttl(ttl_s)

        def work(c: Cursor) -> Any:
            require_session(c, self._q, sid)
            with self._missing(sid):
                return self._one(c, "acquire_lease", session_id=sid, holder=holder, ttl=ttl, now=self._dialect.clock())

        row = self._dialect.write("acquire_lease", sid, work)
        return None if row is None else lease_from_row(row)

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease | None:
        check_lease(lease)
        ttl = check_ttl(ttl_s)

        def work(c: Cursor) -> Any:  # an unknown session has no lease row: None, like any lost lease
            return self._one(c, "renew_lease", **self._lease_params(lease), ttl=ttl, now=self._dialect.clock())

        row = self._dialect.write("renew_lease", lease.session_id, work)
        return None if row is None else lease_from_row(row)

    def release_lease(self, lease: Lease) -> bool:
        check_lease(lease)

        def work(c: Cursor) -> bool:
            params = {**self._lease_params(lease), "now": self._dialect.clock()}
            return bool(c.execute(self._q["release_lease"], params).rowcount == 1)

        return self._dialect.write("release_lease", lease.session_id, work)

    def reap_leases(self) -> int:
        def work(c: Cursor) -> int:
            return int(c.execute(self._q["reap_leases"], {"now": self._dialect.clock()}).rowcount)

        return self._dialect.write("reap_leases", "?", work)

    def leases(self) -> list[Lease]:
        rows = self._dialect.read("leases", "?", lambda c: c.execute(self._q["held_leases"], {}).fetchall())
        return [lease_from_row(r) for r in rows]

    # -- turns ------------------------------------------------------------------

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
        sid = checked_session_id(session_id)
        ttl = check_open_turn(holder, ttl_s, incarnation, rollback, key)

        def work(c: Cursor) -> TurnLease:
            return turning.open_turn(c, self._dialect, sid, holder, ttl, incarnation, rollback, key)

        # durable only where it retracts the turn it replaces or its token could be drawn
        # again after a crash lost it (see `persistence.sql._turns`)
        durable = rollback is not None or not self._dialect.turn_tokens_fenced()
        return self._dialect.write("open_turn", sid, work, durable=durable)

    def seal_turn(self, session_id: str, *, mode: SealMode = "seal", lease: TurnLease | None = None) -> int | None:
        sid = checked_session_id(session_id)
        check_seal(mode, lease)
        return self._dialect.write("seal_turn", sid, lambda c: turning.seal_turn(c, self._dialect, sid, mode, lease))

    def renew_turn(self, lease: TurnLease, ttl_s: float) -> TurnLease | None:
        check_turn(lease)
        ttl = check_ttl(ttl_s)
        return self._dialect.write(
            "renew_turn", lease.session_id, lambda c: turning.renew_turn(c, self._dialect, lease, ttl), durable=False
        )

    def close_turn(self, lease: TurnLease) -> bool:
        check_turn(lease)
        return self._dialect.write(
            "close_turn", lease.session_id, lambda c: turning.close_turn(c, self._dialect, lease), durable=False
        )

    def interrupt_turn(self, session_id: str) -> bool:
        sid = checked_session_id(session_id)
        return self._dialect.write("interrupt_turn", sid, lambda c: turning.interrupt_turn(c, self._dialect, sid))

    def current_turn(self, session_id: str) -> TurnLease | None:
        sid = checked_session_id(session_id)
        return self._dialect.read("current_turn", sid, lambda c: turning.current_turn(c, self._dialect, sid))

    def turns(self, *, holder: str | None = None) -> list[TurnLease]:
        if holder is not None:
            check_text(holder, "holder")
        return self._dialect.read("turns", "?", lambda c: turning.live_turns(c, self._dialect, holder))

    def interrupted_turns(self, holder: str) -> list[TurnLease]:
        check_text(holder, "holder")
        return self._dialect.read(
            "interrupted_turns", "?", lambda c: turning.interrupted_turns(c, self._dialect, holder)
        )

    # -- compaction and cooldowns -----------------------------------------------

    def commit_compaction(
        self,
        lease: Lease,
        *,
        watermark: int,
        compacted: Sequence[Message],
        mode: CompactionMode,
        child_session_id: str | None = None,
        compressor: str = "",
        incarnation: str | None = None,
        usage: Usage | Mapping[str, object] | None = None,
    ) -> CompactionRecord:
        check_incarnation(incarnation)
        usage_text = check_usage(usage)
        params = check_commit_args(
            lease,
            watermark=watermark,
            compacted=compacted,
            mode=mode,
            child_session_id=child_session_id,
            compressor=compressor,
            max_content_bytes=self._max_content_bytes,
        )

        def work(c: Cursor) -> CompactionRecord:
            return compaction.commit_compaction(
                c,
                self._dialect,
                lease,
                watermark=watermark,
                params=params,
                mode=mode,
                child_session_id=child_session_id,
                compressor=compressor,
                usage=usage_text,
                incarnation=incarnation,
            )

        record = self._dialect.write("commit_compaction", lease.session_id, work)
        logger.info(
            "compaction committed: session=%s mode=%s token=%d watermark=%d archived=%d tail=%d child=%s",
            record.session_id,
            record.mode,
            record.token,
            record.watermark,
            record.archived_count,
            record.tail_count,
            record.child_session_id,
        )
        return record

    def compactions(self, session_id: str) -> list[CompactionRecord]:
        sid = checked_session_id(session_id)

        def work(c: Cursor) -> list[CompactionRecord]:
            require_session(c, self._q, sid)
            return [compaction_from_row(r) for r in c.execute(self._q["compactions"], {"session_id": sid}).fetchall()]

        return self._dialect.read("compactions", sid, work)

    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        source: str | None = None,
        archived: bool = True,
        limit: int = 20,
    ) -> list[SearchHit]:
        args = check_search(query, session_id, source, archived, limit)
        return self._dialect.read("search", args.session_id or "?", lambda c: self._dialect.search_hits(c, args))

    def compaction_detail(self, compaction_id: int) -> CompactionDetail:
        check_count(compaction_id, "compaction_id", minimum=1, maximum=2**63 - 1)

        def work(c: Cursor) -> Any:
            return recall.compaction_detail(c, self._dialect, compaction_id)

        detail = self._dialect.read("compaction_detail", "?", work)
        if detail is None:
            raise CompactionNotFoundError(compaction_id)
        return detail

    def usage(self, session_id: str | None = None, source: str | None = None) -> Usage:
        sid, src = check_usage_scope(session_id, source)
        return self._dialect.read("usage", sid or "?", lambda c: recall.usage(c, self._dialect, sid, src))

    def cooldown(self, session_id: str) -> Cooldown | None:
        sid = checked_session_id(session_id)

        def work(c: Cursor) -> Cooldown | None:
            row = require_session(c, self._q, sid)  # the session row carries its cooldown
            if row["cooldown_until"] is None:
                return None
            return Cooldown(sid, float(row["cooldown_until"]), row["cooldown_error"])

        return self._dialect.read("cooldown", sid, work)

    def arm_cooldown(
        self, session_id: str, seconds: float, error: str | None, *, incarnation: str | None = None
    ) -> Cooldown:
        sid = checked_session_id(session_id)
        seconds = check_cooldown_seconds(seconds)
        check_cooldown_error(error)
        check_incarnation(incarnation)

        def work(c: Cursor) -> Cooldown:
            row = self._dialect.lock_session(c, sid)  # the conversation meant, not one re-created under its id
            if incarnation is not None and row["incarnation"] != incarnation:
                raise other_incarnation(sid)
            with self._missing(sid):
                armed = self._one(
                    c, "arm_cooldown", session_id=sid, seconds=seconds, error=error, now=self._dialect.clock()
                )
            return cooldown_from_row(armed)

        return self._dialect.write("arm_cooldown", sid, work)

    def clear_cooldown(self, session_id: str) -> None:
        self.restore_cooldown(session_id, None)

    def restore_cooldown(self, session_id: str, snapshot: Cooldown | None) -> None:
        sid = checked_session_id(session_id)
        snapshot = check_snapshot(sid, snapshot)

        def work(c: Cursor) -> None:
            require_session(c, self._q, sid)
            if snapshot is None:
                c.execute(self._q["delete_cooldown"], {"session_id": sid})
                return
            params = {"session_id": sid, "until": float(snapshot.until), "error": snapshot.error}
            with self._missing(sid):  # an erasure committed since require_session: never recreate its row
                c.execute(self._q["put_cooldown"], params)

        self._dialect.write("restore_cooldown", sid, work)

    # -- plumbing ---------------------------------------------------------------

    @contextlib.contextmanager
    def _missing(self, session_id: str) -> Iterator[None]:
        """A write that names a session erased meanwhile raises `SessionNotFoundError`."""
        try:
            yield
        except self._dialect.missing_session as exc:
            raise SessionNotFoundError(session_id) from exc

    @staticmethod
    def _lease_params(lease: Lease) -> dict[str, Any]:
        return {"session_id": lease.session_id, "holder": lease.holder, "token": lease.token}

    def _one(self, c: Cursor, query: str, **params: Any) -> Any:
        """The first row of named query ``query`` (None: no row)."""
        return c.execute(self._q[query], params).fetchone()
