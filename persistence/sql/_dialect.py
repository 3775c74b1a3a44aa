"""What a database does differently, and nothing more: the dialect a `SqlStore` runs on.

The store owns every operation (its argument checks, its steps in one order, row
mapping, telemetry); a dialect answers the few questions whose answer depends on
the database: how a transaction runs (and is retried), which named queries it
has, what its features are, and whose clock a statement reads. A dialect never
defines a store operation.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from protocol import CompactionRecord, SearchHit, StoredMessage

from .._recall import SearchArgs
from .._submitted import Done

if TYPE_CHECKING:
    from ._messages import AppendJob

__all__ = ["Dialect"]

T = TypeVar("T")

#: The cursor a transaction's work receives: ``sqlite3.Connection`` or a psycopg
#: cursor with dict rows. Both answer ``execute(sql, params)`` with an object that
#: fetches rows (mappings by column name).
Cursor = Any


class Dialect(ABC):
    """One database's transaction runners, queries and clock (see the module docstring)."""

    #: The dialect's named queries (`persistence._queries.load_queries`); the same
    #: names, with the same parameter names, in every dialect.
    queries: Mapping[str, str]

    #: What the database raises when a write names a session erased since the write
    #: looked it up (a foreign key): the store answers `SessionNotFoundError`. Empty
    #: where writes are serialized, so a look-up and its write never race.
    missing_session: tuple[type[BaseException], ...] = ()

    #: What the database raises when an insert names a session id another transaction
    #: created since the insert looked for it: the store answers `SessionExistsError`.
    #: Empty where writes are serialized.
    duplicate_session: tuple[type[BaseException], ...] = ()

    #: How many statements a renew, close or seal of a turn runs to find the row
    #: carrying its lease (`persistence.sql._turns`): more than one where a statement
    #: that waited for a rotation's commit cannot see the continuation it created.
    carrier_rounds: int = 1

    @abstractmethod
    def read(self, what: str, session_id: str, work: Callable[[Cursor], T]) -> T:
        """``work(cursor)`` in a read (retried while the database is busy);
        ``what`` names the operation and ``session_id`` the session, in errors."""

    @abstractmethod
    def write(self, what: str, session_id: str, work: Callable[[Cursor], T], *, durable: bool = True) -> T:
        """``work(cursor)`` in one write transaction, committed before this returns.
        ``durable=False``: committed without waiting for the disk (visible to every
        connection at once, made durable by the next durable commit, which the log
        writes after it): for a write whose loss in an OS or server crash is harmless,
        as a turn's open, renew or close is (see `persistence.sql._turns`)."""

    @abstractmethod
    def check_writable(self, what: str) -> None:
        """`ReadOnlyStoreError` for the write ``what`` on a read-only store (asked before
        anything is queued)."""

    @abstractmethod
    def submit_append(self, job: AppendJob) -> tuple[int, list[int], float]:
        """Write unkeyed ``job`` in the dialect's group commit: ``(first_seq, ids,
        created_at)`` once committed. Its checks (session, incarnation, turn) are the
        writer's statement's."""

    @abstractmethod
    def submit_append_nowait(self, job: AppendJob, done: Done) -> bool:
        """Queue ``job`` for the group commit without waiting: the writer calls
        ``done(result, error)`` once, on its thread. False (nothing queued) where the
        writer cannot take it (no writer thread, or a keyed job it cannot write)."""

    @abstractmethod
    def keyed_append(self, cur: Cursor, job: AppendJob) -> list[StoredMessage]:
        """The body of keyed ``job``, in a write transaction of its own: claim its keys
        (`persistence._keys`), write the messages whose keys were free; the stored
        messages, each key's first in its place."""

    @abstractmethod
    def clock(self) -> float | None:
        """The time a statement compares with (``now`` of the queries): the client's
        clock in epoch seconds, or None where the server reads its own."""

    @abstractmethod
    def lock_session(self, cur: Cursor, session_id: str) -> Any:
        """The session's row, held against concurrent writes until the transaction
        ends (`SessionNotFoundError` when there is none): the locking hook a write
        takes before it checks the row's incarnation."""

    @abstractmethod
    def lock_lineage(self, cur: Cursor, session_id: str) -> list[str]:
        """The ids of the lineage holding ``session_id`` (`SessionNotFoundError` when
        there is none), held against appends and commits until the transaction ends:
        the locking hook of an erasure."""

    @abstractmethod
    def lock_live_tip(self, cur: Cursor, session_id: str, incarnation: str | None = None) -> Any:
        """The row of ``session_id``'s live tip, held against concurrent writes until the
        transaction ends (resolved again where a rotation ended it meanwhile), if it is
        the conversation ``incarnation`` (None: any); `SessionEndedError` for a tip
        ended for another reason than a compaction."""

    @abstractmethod
    def insert_sessions(self, cur: Cursor, rows: list[tuple[str, str, str, str]]) -> dict[str, Any]:
        """Insert plain sessions from (id, source, metadata JSON text, incarnation)
        rows; the rows created, by id (an id taken has none, or raises
        `SessionExistsError` before anything is written)."""

    def grouped_create(self, session_id: str, source: str, metadata: str, incarnation: str) -> Any:
        """The row of plain session ``session_id`` created in a group commit of the
        dialect's own, or None where the store's write transaction is that already."""
        return None

    @abstractmethod
    def insert_child(self, cur: Cursor, parent: Any, child_id: str) -> None:
        """Insert rotation ``child_id`` of session row ``parent`` (its source, metadata,
        incarnation and turn lease carried; its seq counter at 1)."""

    @abstractmethod
    def insert_compacted(
        self, cur: Cursor, target: str, first_seq: int, params: Sequence[Mapping[str, Any]], tail: Sequence[Any]
    ) -> None:
        """Insert a compaction's summary rows ``params`` and copies of the superseded
        ``tail`` rows (in seq order, each naming its original) into ``target`` from
        ``first_seq`` (reserved)."""

    @abstractmethod
    def compaction_committed(self, cur: Cursor, record: CompactionRecord) -> None:
        """Tell other processes of ``record`` (once the transaction commits), where
        they listen."""

    @abstractmethod
    def new_turn_token(self, cur: Cursor) -> int | None:
        """A token for the turn ``open_turn`` opens (``:token``), or None where the
        statement draws it itself."""

    def turn_tokens_fenced(self) -> bool:
        """Whether a turn's open may commit without a durable write of its own: then no
        token `new_turn_token` draws from now on repeats one an open lost in a crash
        drew (a holder that outlived the crash could write into another's turn with
        it). False (the default): every open stays durable."""
        return False

    @abstractmethod
    def turn_closed(self, cur: Cursor, session_id: str) -> None:
        """Tell whoever waits for a turn of ``session_id`` that it ended (once the
        transaction commits), where waiters live beyond this process."""

    @abstractmethod
    def id_list(self, ids: list[Any]) -> Any:
        """``ids`` as the dialect's queries take a list of ids (``:ids``)."""

    @abstractmethod
    def search_hits(self, cur: Cursor, args: SearchArgs) -> list[SearchHit]:
        """The hits of a checked search (`Store.search`): how this database's text index
        and its match of the live rows find them (each backend's ``_recall.py``)."""

    @abstractmethod
    def insert_branch(
        self, cur: Cursor, origin: Any, new_id: str, metadata: str | None, at_seq: int, params: list[dict[str, Any]]
    ) -> None:
        """Insert branch ``new_id`` of session row ``origin`` taken at ``at_seq``: its
        session row (``metadata`` JSON text, None: the origin's) and the copied rows
        ``params`` from seq 1."""
