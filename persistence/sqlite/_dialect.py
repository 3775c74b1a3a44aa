"""SQLite as a `Dialect`: reads on a pool of connections, writes on the group-commit
writer (`persistence.sqlite._writer`), the client's clock."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from protocol import END_REASON_COMPRESSION, CompactionRecord, SearchHit, SessionEndedError, StoredMessage

from .._queries import load_queries
from .._recall import SearchArgs
from .._submitted import Done
from ..sql import Dialect
from ..sql._lifecycle import lineage_ids
from ..sql._lineage import require_incarnation, require_session, resolve_tip
from ..sql._messages import AppendJob
from . import _compaction as compaction
from ._branch import insert_branch
from ._driver import BusyRetry, ReaderPool, map_sqlite_error
from ._recall import search
from ._schema import DIALECT
from ._sessions import insert_sessions, keyed_append
from ._writer import GroupCommitWriter, ReadOnlyWriter

__all__ = ["SqliteDialect"]

T = TypeVar("T")


class SqliteDialect(Dialect):
    """Transactions on one SQLite file: ``readers`` for reads, ``writer`` for writes."""

    def __init__(
        self,
        readers: ReaderPool,
        writer: GroupCommitWriter | ReadOnlyWriter,
        retry: BusyRetry,
        clock: Callable[[], float],
    ) -> None:
        self.queries = load_queries(DIALECT)
        self._readers = readers
        self._writer = writer
        self._retry = retry
        self._clock = clock
        self._readonly = isinstance(writer, ReadOnlyWriter)
        self._fencing = threading.Lock()
        self._fenced = False  # see `turn_tokens_fenced`

    def read(self, what: str, session_id: str, work: Callable[[sqlite3.Connection], T]) -> T:
        """One read transaction (a consistent snapshot), retried while the file is busy."""
        conn = self._readers.checkout()

        def attempt() -> T:
            conn.execute("BEGIN")
            try:
                return work(conn)
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")

        try:
            return self._retry.run(attempt)
        except sqlite3.Error as exc:
            raise map_sqlite_error(exc, session_id) from exc
        finally:
            self._readers.checkin(conn)

    def write(self, what: str, session_id: str, work: Callable[[sqlite3.Connection], T], *, durable: bool = True) -> T:
        """A write transaction on the writer (shared with concurrent writes under group
        commit; a batch of non-``durable`` writes only commits without fsync). Bodies
        read the clock themselves, under the write lock, so lease times follow commit
        order across processes."""
        return self._writer.submit(work, session_id, what=what, durable=durable)

    def check_writable(self, what: str) -> None:
        if self._readonly:
            self._writer.submit(None, what=what)  # the read-only writer refuses every write

    def submit_append(self, job: AppendJob) -> tuple[int, list[int], float]:
        """On the writer, which writes a run of appends in bulk (or this one alone with
        the store's ``one``: `SqliteStore._append_one`)."""
        return self._writer.submit(None, job.session_id, job=job, what="append")

    def submit_append_nowait(self, job: AppendJob, done: Done) -> bool:
        """On the writer, keyed jobs too (it runs each alone); False without a writer
        thread (``group_commit=False``)."""
        return self._writer.submit_nowait(None, job.session_id, job=job, what="append", on_done=done)

    def keyed_append(self, cur: sqlite3.Connection, job: AppendJob) -> list[StoredMessage]:
        """In the writer's transaction: the write lock orders the claims."""
        return keyed_append(cur, self.queries, job.session_id, job.params, self.clock(), job.incarnation, job.turn)

    def lock_session(self, cur: sqlite3.Connection, session_id: str) -> sqlite3.Row:
        """The row: every write already holds the file's write lock (``BEGIN IMMEDIATE``)."""
        return require_session(cur, self.queries, session_id)

    def lock_lineage(self, cur: sqlite3.Connection, session_id: str) -> list[str]:
        """The ids: the write lock already orders this transaction with every other."""
        return lineage_ids(cur, self.queries, session_id)

    def lock_live_tip(self, cur: sqlite3.Connection, session_id: str, incarnation: str | None = None) -> sqlite3.Row:
        """The tip's row: the write lock already keeps a rotation out."""
        tip = require_incarnation(cur, self.queries, resolve_tip(cur, self.queries, session_id)["id"], incarnation)
        if tip["ended_at"] is not None and tip["end_reason"] != END_REASON_COMPRESSION:
            raise SessionEndedError(tip["id"], None, tip["end_reason"])
        return tip

    def insert_sessions(self, cur: sqlite3.Connection, rows: list[tuple[str, str, str, str]]) -> dict[str, Any]:
        return insert_sessions(cur, self.queries, rows, self.clock())

    def insert_child(self, cur: sqlite3.Connection, parent: Any, child_id: str) -> None:
        compaction.insert_child(cur, self.queries, parent, child_id, self.clock())

    def insert_compacted(
        self,
        cur: sqlite3.Connection,
        target: str,
        first_seq: int,
        params: Sequence[Mapping[str, Any]],
        tail: Sequence[Any],
    ) -> None:
        compaction.insert_compacted(cur, self.queries, target, first_seq, params, tail, self.clock())

    def compaction_committed(self, cur: sqlite3.Connection, record: CompactionRecord) -> None:
        """Nothing: every process is on this host, and polls."""

    def new_turn_token(self, cur: sqlite3.Connection) -> int:
        """From the file's one counter."""
        return int(cur.execute(self.queries["next_turn_token"]).fetchone()["token"])

    def turn_tokens_fenced(self) -> bool:
        """Once this store moved the file's token counter far ahead in a durable write
        (before its first turn opens): only an OS crash loses an unsynced open, and it
        ends every process of this host, so each one that draws tokens after it starts
        with this write, above every token drawn before it (far fewer than the gap are
        drawn between two syncs of the WAL)."""
        if not self._fenced:
            with self._fencing:
                if not self._fenced:
                    fence = self.queries["fence_turn_tokens"]
                    self._writer.submit(lambda c: c.execute(fence), what="open_turn")
                    self._fenced = True
        return True

    def turn_closed(self, cur: sqlite3.Connection, session_id: str) -> None:
        """Nothing: a turn's waiters are on this host, and poll."""

    def insert_branch(
        self,
        cur: sqlite3.Connection,
        origin: Any,
        new_id: str,
        metadata: str | None,
        at_seq: int,
        params: list[dict[str, Any]],
    ) -> None:
        insert_branch(cur, self.queries, origin, new_id, metadata, at_seq, params, self.clock())

    def search_hits(self, cur: sqlite3.Connection, args: SearchArgs) -> list[SearchHit]:
        return search(cur, self.queries, args)

    def id_list(self, ids: list[Any]) -> str:
        """A JSON array (the queries read it with ``json_each``)."""
        return json.dumps(ids)

    def clock(self) -> float:
        return float(self._clock())
