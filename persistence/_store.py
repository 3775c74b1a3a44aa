"""The `Store` interface every backend implements.

One contract, one test suite (``tests/contract``) run against every backend.
Every method that takes a session id raises `SessionNotFoundError` for an unknown
one (except `Store.get_session`, which returns None) and `InvalidSessionIdError` for
a malformed one. Driver errors surface as `TranscriptError` subclasses
(`StoreBusyError` when the database stayed locked past the patience budget).
Every write is one transaction: when a method raises, it wrote nothing.
All methods are safe to call from any thread.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from protocol import (
    CompactionDetail,
    CompactionRecord,
    Cooldown,
    Lease,
    Message,
    SearchHit,
    SessionInfo,
    StoredMessage,
    TurnLease,
    Usage,
)
from protocol._records import CompactionMode
from protocol._turns import SealMode

from ._submitted import OnDone

__all__ = [
    "NO_FEATURES",
    "HolderAnnouncement",
    "HolderAwareStore",
    "SilentAnnouncement",
    "Store",
    "StoreFeatures",
    "SubmittingStore",
    "WriteStats",
    "features_of",
    "submits",
]


@dataclass(frozen=True, slots=True)
class StoreFeatures:
    """What a store's class can do beyond the `Store` protocol, declared by the class
    (``store.features``) instead of probed for by name.

    - ``submits``: `SubmittingStore.append_nowait` (an event loop's append is queued
      for the writer thread without waiting);
    - ``announces_turns``: ``listen_turns()``, a listener woken when a turn closes
      anywhere (PostgreSQL's LISTEN/NOTIFY; without it a registry polls);
    - ``checks_pages``: fsck can check the file's pages before reading rows (SQLite);
    - ``checksums_rows``: every row carries a checksum of its text that fsck compares;
    - ``knows_holders``: `HolderAwareStore`: a registry announces its holder
      (``announce_holder``) and asks whether another holder's process still has its
      database session (``holder_alive``), so a turn of one killed on another host is
      sealed at once (PostgreSQL on a direct connection; behind PgBouncer the store
      answers None: nobody can tell, the lease stands);
    - ``local_clock``: ``now()`` reads this process's clock, no I/O, so an event
      loop may call it (SQLite; PostgreSQL asks its server).
    """

    submits: bool = False
    announces_turns: bool = False
    checks_pages: bool = False
    checksums_rows: bool = False
    knows_holders: bool = False
    local_clock: bool = False


#: What a store class that declares nothing (a user's wrapper, say) is taken to do.
NO_FEATURES = StoreFeatures()


def features_of(store: object) -> StoreFeatures:
    """The features ``store``'s class declares: a wrapper that forwards calls by
    ``__getattr__`` declares none of its inner store's, so it is used through the
    `Store` protocol alone (its own ``append``, never the inner ``append_nowait``)."""
    for klass in type(store).__mro__:
        declared = klass.__dict__.get("features")
        if isinstance(declared, StoreFeatures):
            return declared
    return NO_FEATURES


@dataclass(frozen=True, slots=True)
class WriteStats:
    """Counters of a backend's group-commit writer (``store.write_stats()``, not part
    of the `Store` protocol): committed transactions, the requests they held,
    requests of the batch being attempted now, requests waiting in the queue, and how
    many of those transactions held only writes that need no fsync of their own (a
    turn's open, renew or close) and committed without one."""

    transactions: int
    requests: int
    in_flight: int
    queued: int
    unsynced: int = 0


@runtime_checkable
class Store(Protocol):
    """Durable sessions, transcripts, leases, cooldowns and compaction records."""

    #: what the class can do beyond this protocol (read it with `features_of`)
    features: StoreFeatures

    # -- sessions ---------------------------------------------------------------

    def create_session(
        self,
        session_id: str,
        *,
        source: str = "api",
        parent_session_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> SessionInfo:
        """Create a session.

        ``parent_session_id`` makes it a *continuation*: the parent must exist and have
        ended with reason ``"compression"``. ``metadata`` is the application's JSON
        object (str keys, at most 64 levels deep, no NUL), empty by default.

        Raises: `SessionExistsError` if the id is taken; `InvalidLineageError` if the
        parent did not end by compression; `SessionNotFoundError` for an unknown parent;
        `InvalidMetadataError` (an `InvalidArgumentError`) for bad metadata.
        """
        ...

    def create_sessions(
        self,
        session_ids: Sequence[str],
        *,
        source: str = "api",
        metadata: Mapping[str, Any] | None = None,
    ) -> list[SessionInfo]:
        """Create many new sessions (no parents) in one transaction: all of them or,
        on any error, none. Returns them in the order given. The transaction holds
        the write lock (SQLite) while it runs: split a very large set into calls of
        some 100,000 ids when other writers share the database.

        Raises: `SessionExistsError` for the first id that is taken or given twice;
        `InvalidSessionIdError` for a bad id; `InvalidArgumentError` when
        ``session_ids`` is not a sequence of ids; `InvalidMetadataError` for bad metadata.
        """
        ...

    def get_session(self, session_id: str) -> SessionInfo | None:
        """The session, or None for an unknown id."""
        ...

    def end_session(self, session_id: str, reason: str) -> SessionInfo:
        """End a session. Idempotent with the same reason.

        Raises: `SessionEndedError` if it already ended with another reason.
        """
        ...

    def sessions(
        self,
        *,
        live: bool | None = None,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        after: SessionInfo | str | None = None,
        limit: int | None = None,
    ) -> list[SessionInfo]:
        """Sessions newest first by ``(created_at, id)``.

        ``live=True`` only open ones, ``False`` only ended ones; ``source`` exact;
        ``metadata`` filters on every given key, values equal as JSON scalars (numbers
        by value, booleans never equal to numbers, strings exact; None matches a
        missing key or ``null``). ``after`` continues after a page (keyset paging on
        ``(created_at, id)``): the page's last `SessionInfo` (works even if that
        session was erased since) or its id. ``limit`` None = all, else >= 1.

        Raises: `SessionNotFoundError` for an ``after`` id that is gone;
        `InvalidArgumentError` for a bad filter or limit.
        """
        ...

    def update_metadata(self, session_id: str, patch: Mapping[str, Any]) -> SessionInfo:
        """Merge ``patch`` into the session's metadata (top level); a key whose value is
        None is removed. One transaction.

        Raises: `InvalidMetadataError` for a bad patch (nothing written).
        """
        ...

    def delete_session(self, session_id: str) -> int:
        """**Erase** the whole lineage holding ``session_id`` (its root and every
        continuation): sessions, messages in every state, compaction records, leases,
        cooldowns and metadata, in one transaction. Returns the number of messages
        erased. A compaction of that lineage in flight elsewhere commits nothing (its
        commit finds no session) and its cleanup recreates nothing. The one operation
        that deletes data.
        """
        ...

    def retract(
        self, session_id: str, *, incarnation: str | None = None, turn: TurnLease | None = None
    ) -> StoredMessage | None:
        """Take the last live message of the live tip (``session_id`` is resolved) out
        of the live transcript: state ``"retracted"``, kept in the archive, its seq
        never reused. Returns it as it was, or None when the transcript is empty.
        ``incarnation`` (a `SessionInfo.incarnation`): retract only from that
        conversation, checked inside the write (None: whichever the id names now).

        ``turn``: the turn lease the caller retracts under.

        Raises: `SessionEndedError` when the tip ended for another reason than
        compression; `LineageForkedError`; `SessionNotFoundError` when the tip is
        another incarnation (the lineage meant was erased and the id reused);
        `TurnHeldError` while another holder's turn lease is live on the tip;
        `DeadTurnError` while the tip holds a dead turn (see `seal_turn`).
        """
        ...

    def prune_archive(self, *, older_than_s: float, session_id: str | None = None) -> int:
        """Retention: archived rows (compacted, superseded, retracted) that left the live
        transcript ``older_than_s`` seconds ago or more (0: all) keep their ``id``,
        ``seq``, ``role``, ``tool_call_id`` and ``created_at`` but lose their content
        (``""``), ``name``, ``tool_calls`` and ``meta``, and become ``"pruned"``. With
        ``session_id``, only that session's lineage. Compaction records stay; seqs stay
        1..N. Returns the number of rows pruned.

        Raises: `InvalidArgumentError` unless ``older_than_s`` is a finite number >= 0.
        """
        ...

    def expire(
        self,
        idle_for_s: float,
        *,
        source: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        dry_run: bool = False,
    ) -> list[str]:
        """Erase every lineage idle for at least ``idle_for_s`` seconds (>= 0); the root
        ids of the lineages erased (with ``dry_run``: that would be, erasing nothing).

        Idle: no session of the lineage created, and no message appended to it, in that
        time (on the store's clock), and no turn or compaction lease of it live now.
        ``source`` keeps lineages of that source; ``metadata`` those whose live tip (a
        session without a continuation) matches, as `sessions` matches. Each lineage is
        erased as by `delete_session`, in its own transaction that checks it is still
        idle: an append committed meanwhile keeps it.

        Raises: `InvalidArgumentError` for a negative, non-finite or non-numeric
        ``idle_for_s``, a bad filter or a non-bool ``dry_run``.
        """
        ...

    def branch(
        self, session_id: str, at_seq: int, new_id: str, *, metadata: Mapping[str, Any] | None = None
    ) -> SessionInfo:
        """Start session ``new_id`` whose live transcript is a copy of ``session_id``'s
        live messages up to seq ``at_seq``: a conversation of its own (a new
        incarnation, no parent, the same source, ``metadata`` or a copy of the
        session's), with ``SessionInfo.branch_of == (session_id, at_seq)``. The copies
        keep role, content, name, tool fields and meta, and get seqs from 1; the
        session branched from is not touched. A branch is not a continuation: `resolve`,
        `children` and fsck's fork check never count it.

        Raises: `SessionNotFoundError`; `SessionExistsError` for an existing ``new_id``;
        `InvalidArgumentError` when ``at_seq`` is not a live message of the session,
        when the prefix would cut a tool call from its result, or when ``new_id`` is
        ``session_id``; `InvalidMetadataError`.
        """
        ...

    def children(self, session_id: str) -> list[SessionInfo]:
        """Sessions whose ``parent_session_id`` is this one, oldest first."""
        ...

    def resolve(self, session_id: str) -> str:
        """The live tip of the lineage: follow compression-ended parents to their
        unique continuation. A compression-ended session with no child resolves to
        itself; a session ended for another reason resolves to itself.

        Raises: `LineageForkedError` where a parent has two or more children.
        """
        ...

    # -- messages ---------------------------------------------------------------

    def append(
        self,
        session_id: str,
        messages: Message | Sequence[Message],
        *,
        incarnation: str | None = None,
        turn: TurnLease | None = None,
    ) -> list[StoredMessage]:
        """Append one or many messages in one transaction; durable when it returns.

        Seqs are assigned under a per-session lock, in commit order, so a compaction
        watermark never skips a message that commits later. Never blocked by a lease.
        ``incarnation`` (a `SessionInfo.incarnation`): append only to that
        conversation, checked inside the write (None: whichever the id names now).
        Actors pass theirs, so a lineage erased and started again by another process
        never receives a write meant for the old one.

        While a holder's turn lease is live on the session, only appends carrying
        it (``turn``) are admitted; while the session holds a dead turn (its lease
        lapsed before its holder closed it), none is, until `seal_turn` seals it.
        The check is part of the append's own write.
        A message with a ``key`` already stored in the conversation (any session of
        the lineage, live or archived) is not written again: the stored message is
        returned in its place (its live copy when a compaction carried it); a key
        repeated within one append is stored once.

        Raises: `TurnHeldError` while another holder's turn lease is live;
        `DeadTurnError` (a `TurnHeldError`) while the session holds a dead turn,
        whatever the append carries; `SessionEndedError` (``successor_id`` = the live continuation, or None
        when there is none or the lineage forked) for an ended session;
        `SessionNotFoundError` for an unknown id or another incarnation;
        `InvalidMessageError` for a message over the store's content limit.
        """
        ...

    def transcript(
        self, session_id: str, *, incarnation: str | None = None, limit: int | None = None
    ) -> list[StoredMessage]:
        """Live messages in ``seq`` order; with ``limit`` (>= 1), only the latest
        ``limit`` of them, read at a cost that follows ``limit``, not the transcript's
        length. ``incarnation`` (a `SessionInfo.incarnation`): only from that
        conversation; one erased and started again under the same id raises
        `SessionNotFoundError` instead of returning the new conversation's, and an
        id a compaction rotated away from raises `SessionEndedError` naming the live
        continuation (a read that names the conversation means where it lives now)."""
        ...

    def archive(self, session_id: str, *, incarnation: str | None = None) -> list[StoredMessage]:
        """Every non-live message (compacted, superseded, retracted, pruned), oldest
        (lowest seq) first. ``incarnation``: as for `transcript`."""
        ...

    # -- recall -----------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        session_id: str | None = None,
        source: str | None = None,
        archived: bool = True,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Messages whose text holds every word of ``query``: the archive's, best
        first, then the live transcript's, newest first (``limit`` in all).

        ``session_id`` searches its whole lineage (the root and every continuation);
        ``source`` only sessions of that source; ``archived=False`` only live rows.
        A message carried across compactions is one hit, at its newest copy.
        Retracted and pruned messages never match. A query is plain words, never
        query syntax: quotes, ``*``, ``OR`` and ``-`` are matched as text.

        Raises: `InvalidArgumentError` for an empty query, one without a letter or
        digit, one over 1,000 characters, or ``limit`` outside 1..1000;
        `SessionNotFoundError` for an unknown ``session_id``.
        """
        ...

    def usage(self, session_id: str | None = None, source: str | None = None) -> Usage:
        """The token usage recorded on messages (`Message.usage`) and compactions
        (``commit_compaction(usage=...)``), summed: of ``session_id``'s whole lineage,
        of sessions of ``source``, or (both None) of the whole store.

        Every recorded call counts once: messages in any state (a compacted or
        retracted message's call was made all the same), never a copy (a carried
        tail, a branch's prefix), which records none. The sum's ``by_model`` holds
        the totals per model (``""``: calls without one); ``compactions`` the
        compressors' share. An erased lineage's usage is erased with it.

        Raises: `SessionNotFoundError` for an unknown ``session_id``;
        `InvalidSessionIdError` or `InvalidArgumentError` for a bad argument.
        """
        ...

    def compaction_detail(self, compaction_id: int) -> CompactionDetail:
        """What compaction ``compaction_id`` did: the rows it archived, the summary it
        wrote and the tail it carried (`CompactionDetail`).

        Raises: `CompactionNotFoundError` when no record has that id (its lineage
        was erased, or it never existed).
        """
        ...

    # -- leases -----------------------------------------------------------------

    def acquire_lease(self, session_id: str, holder: str, ttl_s: float) -> Lease | None:
        """Take the compaction lease of any existing session, ended or not.

        None if another holder's lease is live. Otherwise a new lease whose token is
        the previous token + 1 (also when the same holder re-acquires); the first
        lease of an id starts above every token of an erased lease row, so tokens
        never restart when a lineage is erased and its id used again. Expiry is
        computed on the database's clock.

        Raises: `InvalidArgumentError` (a `ValueError`) unless ``ttl_s`` is finite and > 0.
        """
        ...

    def renew_lease(self, lease: Lease, ttl_s: float) -> Lease | None:
        """Extend a lease. None (final) when the row no longer has this holder and
        token, or has expired. Raises only on store errors (transient)."""
        ...

    def release_lease(self, lease: Lease) -> bool:
        """Release a lease; True iff the row still had this holder and token."""
        ...

    def reap_leases(self) -> int:
        """Release every expired lease (garbage a crash or a failed release left):
        the holder is cleared and the token kept, so tokens never go backwards; a
        live lease is never touched. Returns how many were released."""
        ...

    def current_lease(self, session_id: str) -> Lease | None:
        """The live lease, if any (for inspection; never a basis for a write)."""
        ...

    def leases(self) -> list[Lease]:
        """Every lease still held: live, or expired and not yet released or reaped."""
        ...

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
        """Take the turn lease of the live session ``session_id`` for ``holder``, for
        ``ttl_s`` seconds (store clock), with a new token (one counter of the whole
        store: it only grows). A lease that is free (closed or sealed) or live and
        already ``holder``'s is taken; a dead one (lapsed before its holder closed it)
        is not, whoever asks, until `seal_turn` seals it. ``rollback``: the token of
        the turn this one replaces; that turn's messages still at the end of the live
        transcript are retracted in the same transaction (`TurnLease.rolled_back`
        counts them).

        ``key``: the turn's idempotency key (a message key's rules), unique per
        conversation (every session of the lineage; an erased and re-created id is
        another conversation). A turn of ``key`` that was completed (`close_turn`)
        is not run again: `TurnReplayedError` carries the messages it stored, and
        nothing is written. While the turn of ``key`` is live, `TurnHeldError`
        (whoever asks: wait, then open again and replay); while it is dead,
        `DeadTurnError`; once sealed, ``key`` opens a fresh turn.

        Raises: `TurnHeldError` (``holder``, ``expires_at``, ``token``) while another
        holder's lease is live; `DeadTurnError` while the session holds a dead turn;
        `TurnReplayedError`; `SessionEndedError` (with ``successor_id``);
        `SessionNotFoundError`; `InvalidMessageError` for a bad ``key``.
        """
        ...

    def renew_turn(self, lease: TurnLease, ttl_s: float) -> TurnLease | None:
        """Extend a live turn lease (found by its token, on whichever live session
        carries it now); None when it expired or was closed. The result's
        ``interrupted`` says whether someone asked the holder to end the turn."""
        ...

    def close_turn(self, lease: TurnLease) -> bool:
        """Release the turn lease (holder and token checked, on whichever live session
        carries it now, a rotation committing meanwhile included); False when it was
        no longer this holder's. The token stays on the row (for a rollback). A keyed
        turn (`open_turn` ``key``) is completed: its key replays from now on."""
        ...

    def seal_turn(self, session_id: str, *, mode: SealMode = "seal", lease: TurnLease | None = None) -> int | None:
        """End a turn its holder did not close, so the session takes writes again.

        ``lease`` None: the dead turn of ``session_id``'s live tip (``session_id`` is
        resolved), one whose lease lapsed while its holder still held it; None when
        the tip holds none (a live or closed turn: nothing written). ``lease`` given:
        that turn (token and holder), live or lapsed, on whichever live session
        carries it (its holder gives up on it); None when it is no longer any live
        session's (closed or replaced).

        In one transaction, fenced by the session row (re-checked there): the turn's
        rows still at the end of the live transcript are retracted per ``mode``
        (as `retract` takes a row out: archived, its seq kept), and the lease is
        released, its token kept (as `close_turn` does). ``mode``: ``"seal"``
        retracts, from the first row of that trailing run that leaves the transcript
        invalid for a chat API (an assistant message whose tool calls are not all
        answered after it, a result without its call), every row of the run except
        ``user`` messages (see `protocol._turns.seal_retractions`): afterwards every
        tool call in the live transcript is followed by its results. ``"keep"``
        retracts nothing; ``"rollback"`` the whole trailing run (as ``open_turn``
        ``rollback`` does). A keyed turn is sealed: its key opens a fresh turn.
        Returns the number of rows retracted.

        Raises: `InvalidArgumentError` for a bad ``mode`` or ``lease`` (nothing
        written); `SessionNotFoundError`; `SessionEndedError` when the tip ended for
        another reason than compression; `LineageForkedError`.
        """
        ...

    def interrupt_turn(self, session_id: str) -> bool:
        """Ask the holder of the live turn on ``session_id``'s live tip to end it (a
        flag the holder reads); False when no turn is open."""
        ...

    def current_turn(self, session_id: str) -> TurnLease | None:
        """The live turn lease on this session row, with ``first_seq`` (the seq of its
        first live message, None before it appended)."""
        ...

    def turns(self, *, holder: str | None = None) -> list[TurnLease]:
        """Every live turn lease (of ``holder`` only, when given)."""
        ...

    def interrupted_turns(self, holder: str) -> list[TurnLease]:
        """``holder``'s turn leases someone asked it to end (one read for all of
        them: the registry polls it while it has turns open)."""
        ...

    # -- compaction -------------------------------------------------------------

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
        usage: Usage | Mapping[str, Any] | None = None,
    ) -> CompactionRecord:
        """Publish a compaction in one fenced transaction. ``incarnation``: commit only
        into that conversation (an erased and re-created id is another one, whose lease
        tokens began anew): `SessionNotFoundError` otherwise, nothing written.
        ``usage``: what the compressor's model calls used (`CompactionRecord.usage`,
        counted by `usage`); the compacted set's own ``usage`` and ``key`` are not
        stored, nor are those of the copies.

        The lease check (holder, token, not expired) is part of the write itself.
        A snapshot holding a row of the session's open turn, live or dead (not yet
        sealed), is refused (`TurnHeldError`): the turn travels whole in the tail.
        Live rows with ``seq <= watermark`` become ``compacted``; live rows above it
        (the tail) become ``superseded`` and are copied verbatim, in order, after the
        compacted set, each copy carrying ``origin_id``. ``"in_place"``: these become
        the session's new live rows (seqs continue from ``max(seq) + 1``).
        ``"rotate"``: they become the transcript of a new child session (seq from 1,
        same source); the parent ends with reason ``"compression"``. A None
        ``child_session_id`` is derived from the parent id and the new epoch.

        Raises: `LeaseLostError` when fencing rejects the commit; `SessionEndedError`
        for an ended session; `SessionExistsError` if the child id is taken;
        `SnapshotRetractedError` when the message at ``watermark`` was retracted since
        the snapshot (checked inside the transaction); `SessionNotFoundError` when the
        lineage was erased; `InvalidArgumentError` for a bad ``usage``.
        Nothing is written when it raises.
        """
        ...

    def compactions(self, session_id: str) -> list[CompactionRecord]:
        """Compaction records of this session, oldest first."""
        ...

    # -- cooldowns --------------------------------------------------------------

    def cooldown(self, session_id: str) -> Cooldown | None:
        """The raw cooldown row, live or expired; None when none is set."""
        ...

    def arm_cooldown(
        self, session_id: str, seconds: float, error: str | None, *, incarnation: str | None = None
    ) -> Cooldown:
        """Set ``until = max(old, now + seconds)``; ``error`` is replaced only when the
        new ``until`` wins. ``incarnation``: only on that conversation
        (`SessionNotFoundError` otherwise, nothing written)."""
        ...

    def clear_cooldown(self, session_id: str) -> None:
        """Remove the cooldown row."""
        ...

    def restore_cooldown(self, session_id: str, snapshot: Cooldown | None) -> None:
        """Write ``snapshot`` back verbatim; None clears the row."""
        ...

    # -- lifecycle --------------------------------------------------------------

    def now(self) -> float:
        """The store's clock (epoch seconds): the one lease expiry is computed on."""
        ...

    def close(self) -> None:
        """Release connections and threads. Idempotent."""
        ...


class SubmittingStore(Store, Protocol):
    """A `Store` whose group-commit writer also takes appends without waiting for them
    (both shipped backends): the path ``handle.append_async`` uses from an event loop.

    The runtime checks the store's *class* (`submits`), so a wrapper that delegates
    by ``__getattr__`` is used through its own ``append``.
    """

    def append_nowait(
        self,
        session_id: str,
        messages: Message | Sequence[Message],
        on_done: OnDone,
        *,
        incarnation: str | None = None,
        turn: TurnLease | None = None,
    ) -> bool:
        """`Store.append` without waiting: the messages are checked now (a bad one
        raises here, nothing queued), then queued for the writer thread, which calls
        ``on_done(stored, None)`` once they are committed or ``on_done(None, error)``
        when nothing was written; ``stored()`` builds the `StoredMessage` s (call it
        off the writer thread). ``on_done`` runs on the writer thread: it must be
        quick, must not wait on this store, and may return a wake-up the writer
        calls once per batch. False (nothing queued) when this store has no writer
        thread: call `Store.append`."""
        ...


class HolderAnnouncement(Protocol):
    """A holder announced by `HolderAwareStore.announce_holder`, for as long as it is
    kept open: close it when the registry closes (the store's close closes it too)."""

    def keep(self) -> bool:
        """Make sure the announcement still stands (its connection may have been cut:
        then it announces again on a new one); cheap enough to call every tick (no
        I/O while the connection is quiet). True when it stands."""
        ...

    def close(self) -> None:
        """Withdraw the announcement. Idempotent."""
        ...


class SilentAnnouncement:
    """The `HolderAnnouncement` of a store that cannot announce: nothing held."""

    def keep(self) -> bool:
        return False

    def close(self) -> None:
        pass


class HolderAwareStore(Store, Protocol):
    """A `Store` that knows which holders' processes still have their database
    session (``StoreFeatures.knows_holders``; the runtime checks the store's class,
    never probes for the methods)."""

    def announce_holder(self, holder: str) -> HolderAnnouncement:
        """Announce that ``holder``'s process is alive for as long as the returned
        announcement stays open (PostgreSQL: a session-level advisory lock named after
        it, held on a connection of its own, and a row of ``holders``). A store that
        cannot announce (behind PgBouncer, read-only) returns one that does nothing.

        Raises: `InvalidArgumentError` for an empty ``holder``; `TranscriptError`
        when the database cannot be reached.
        """
        ...

    def holder_alive(self, holder: str) -> bool | None:
        """Whether ``holder``'s process still has its database session: True while its
        announcement stands (a frozen process's too), False when ``holder`` was
        announced and its session is gone (killed, crashed, its connection cut),
        None when this store cannot tell (never announced, or withdrawn by a clean
        close; behind PgBouncer; SQLite). Never a basis for a write: the seal that
        follows a False is fenced by the turn's token."""
        ...


def submits(store: Store) -> bool:
    """Does ``store``'s class implement `SubmittingStore.append_nowait`?"""
    return features_of(store).submits
