"""`SqlStore`: every `Store` operation written once, over a `Dialect`.

An operation checks its arguments (nothing is written before they pass), runs its
steps in one transaction of the dialect's, and maps the rows to protocol values.
The backends (`SqliteStore`, `PostgresStore`) open their dialect and hand it here.
The session operations are its base's (`SessionOperations`, `_sessionops.py`); each
transaction body is a function of the dialect's cursor in the module of its kind.

An append is checked on its caller's thread into an `AppendJob` (nothing is written,
or queued, before that); the dialect hands it to its group commit, and the stored
messages are built here, off the writer thread, which every append waits for.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from protocol import (
    CompactionDetail,
    CompactionNotFoundError,
    CompactionRecord,
    Cooldown,
    Lease,
    Message,
    SearchHit,
    StoredMessage,
    TurnLease,
    Usage,
)
from protocol._checks import check_count, check_text
from protocol._records import CompactionMode
from protocol._turns import SealMode

from .. import _telemetry as telemetry
from .._metadata import check_page_limit
from .._recall import check_search
from .._rows import (
    check_commit_args,
    check_cooldown_error,
    check_cooldown_seconds,
    check_incarnation,
    check_lease,
    check_messages,
    check_open_turn,
    check_seal,
    check_snapshot,
    check_ttl,
    check_turn,
    check_usage,
    checked_session_id,
    keyed,
    stored_message_from_row,
)
from .._submitted import OnDone, completion, stored_messages
from .._usage import check_usage_scope
from . import _compaction as compaction
from . import _cooldowns as cooldowns
from . import _leases as leasing
from . import _recall as recall
from . import _sessions as rows
from . import _turns as turning
from ._dialect import Cursor
from ._messages import AppendJob, new_job, nothing_appended, read_messages
from ._sessionops import SessionOperations

__all__ = ["SqlStore"]

logger = logging.getLogger("session_actors.store")


class SqlStore(SessionOperations):
    """The operations of a `Store` over ``dialect`` (see the module docstring)."""

    # -- messages ---------------------------------------------------------------

    @telemetry.timed_append
    def append(
        self,
        session_id: str,
        messages: Message | Sequence[Message],
        *,
        incarnation: str | None = None,
        turn: TurnLease | None = None,
    ) -> list[StoredMessage]:
        messages, job = self._append_job(session_id, messages, incarnation, turn)
        # partials, not closures: a closure would make cells of this hot function's names
        if not job.params:
            answer = functools.partial(nothing_appended, q=self._q, session_id=session_id, incarnation=incarnation)
            return self._dialect.read("append", session_id, answer)
        if job.keyed:  # it reads and claims its keys: a write transaction of its own
            return self._dialect.write("append", session_id, functools.partial(self._dialect.keyed_append, job=job))
        first_seq, ids, created_at = self._dialect.submit_append(job)
        # built here, not on the writer thread: the writer is the shared bottleneck
        return stored_messages(messages, job.params, session_id, first_seq, ids, created_at)

    def append_nowait(
        self,
        session_id: str,
        messages: Message | Sequence[Message],
        on_done: OnDone,
        *,
        incarnation: str | None = None,
        turn: TurnLease | None = None,
    ) -> bool:
        """`SubmittingStore.append_nowait`: the messages are checked now (a bad one
        raises here, nothing queued), then queued for the group-commit writer, which
        calls ``on_done(stored, None)`` once they are committed, or ``on_done(None,
        error)`` when nothing was written. ``stored()`` builds the `StoredMessage`s:
        call it off the writer thread (the shared bottleneck). ``on_done`` runs on the
        writer thread: it must be quick, must not wait on this store, and may return a
        wake-up the writer calls once per batch. False (nothing queued) for an empty
        append, or when the dialect's writer cannot take it (SQLite with
        ``group_commit=False``; on PostgreSQL an append with idempotency keys, a
        transaction of its own): call `append`. ``incarnation`` and ``turn`` as for
        `append`."""
        messages, job = self._append_job(session_id, messages, incarnation, turn)
        if not job.params:
            return False
        return self._dialect.submit_append_nowait(job, completion(on_done, messages, job.params, session_id, logger))

    def _append_job(
        self, session_id: str, messages: Message | Sequence[Message], incarnation: str | None, turn: TurnLease | None
    ) -> tuple[Sequence[Message], AppendJob]:
        """An append's checked arguments: its messages as a sequence and its job (column
        values, the conversation and turn meant, whether a message carries a key), on
        a store that may write. Nothing is written, or queued, before this passes."""
        checked_session_id(session_id)
        if incarnation is not None:  # the common case skips the call
            check_incarnation(incarnation)
        token = None if turn is None else check_turn(turn)
        originals = (messages,) if isinstance(messages, Message) else messages
        params = check_messages(originals, self._max_content_bytes)
        self._dialect.check_writable("append")
        return originals, new_job(AppendJob, (session_id, params, incarnation, token, keyed(params)))

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
        return self._dialect.read(query, sid, lambda c: read_messages(c, self._q, query, sid, incarnation, limit))

    # -- leases -----------------------------------------------------------------

    def current_lease(self, session_id: str) -> Lease | None:
        sid = checked_session_id(session_id)
        return self._dialect.read("current_lease", sid, lambda c: leasing.current_lease(c, self._dialect, sid))

    def acquire_lease(self, session_id: str, holder: str, ttl_s: float) -> Lease | None:
        sid = checked_session_id(session_id)
        check_text(holder, "holder")
        ttl = check_ttl(ttl_s)
        return self._dialect.write(
            "acquire_lease", sid, lambda c: leasing.acquire_lease(c, self._dialect, sid, holder, ttl)
        )

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease | None:
        check_lease(lease)
        ttl = check_ttl(ttl_s)
        return self._dialect.write(
            "renew_lease", lease.session_id, lambda c: leasing.renew_lease(c, self._dialect, lease, ttl)
        )

    def release_lease(self, lease: Lease) -> bool:
        check_lease(lease)
        return self._dialect.write(
            "release_lease", lease.session_id, lambda c: leasing.release_lease(c, self._dialect, lease)
        )

    def reap_leases(self) -> int:
        return self._dialect.write("reap_leases", "?", lambda c: leasing.reap_leases(c, self._dialect))

    def leases(self) -> list[Lease]:
        return self._dialect.read("leases", "?", lambda c: leasing.held_leases(c, self._dialect))

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
        # a keyed turn's close completes its key: lost in a crash, the key would open
        # afresh and the same message be answered twice, so that close waits for the disk
        durable = lease.key is not None or self._dialect.read(
            "close_turn", lease.session_id, lambda c: turning.turn_keyed(c, self._dialect, lease.token)
        )
        return self._dialect.write(
            "close_turn", lease.session_id, lambda c: turning.close_turn(c, self._dialect, lease), durable=durable
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

        return compaction.logged(self._dialect.write("commit_compaction", lease.session_id, work))

    def compactions(self, session_id: str) -> list[CompactionRecord]:
        sid = checked_session_id(session_id)

        return self._dialect.read("compactions", sid, lambda c: compaction.compactions(c, self._q, sid))

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
        return self._dialect.read("cooldown", sid, lambda c: cooldowns.cooldown(c, self._dialect, sid))

    def arm_cooldown(
        self, session_id: str, seconds: float, error: str | None, *, incarnation: str | None = None
    ) -> Cooldown:
        sid = checked_session_id(session_id)
        seconds = check_cooldown_seconds(seconds)
        check_cooldown_error(error)
        check_incarnation(incarnation)

        def work(c: Cursor) -> Cooldown:
            return cooldowns.arm_cooldown(c, self._dialect, sid, seconds, error, incarnation)

        return self._dialect.write("arm_cooldown", sid, work)

    def clear_cooldown(self, session_id: str) -> None:
        self.restore_cooldown(session_id, None)

    def restore_cooldown(self, session_id: str, snapshot: Cooldown | None) -> None:
        sid = checked_session_id(session_id)
        snapshot = check_snapshot(sid, snapshot)
        self._dialect.write(
            "restore_cooldown", sid, lambda c: cooldowns.restore_cooldown(c, self._dialect, sid, snapshot)
        )
