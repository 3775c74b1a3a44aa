"""PostgreSQL as a `Dialect`: every transaction through `PgDatabase.run` (retries,
deadlines, read-only checks), times from the server's clock (or from a clock the
store was given: the testing harness's)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from protocol import CompactionRecord, SearchHit, SessionEndedError, SessionNotFoundError, StoredMessage

from .._queries import load_queries
from .._recall import SearchArgs
from .._submitted import Done
from ..sql import Dialect
from ..sql._lifecycle import lineage_ids
from ..sql._messages import AppendJob
from ._batch import append_payload, create_many, refusal, waiting_for_locks
from ._branch import insert_branch
from ._compaction import insert_compacted, notify_compaction
from ._driver import PgDatabase
from ._keys import keyed_append
from ._lineage import lock_live_tip
from ._recall import search
from ._schema import DIALECT
from ._writer import CreateJob, PgWriter

__all__ = ["PgDialect"]

T = TypeVar("T")

# A lineage that keeps growing while it is locked is being rotated in a loop: give up
# rather than spin (the caller's retry starts over).
_MAX_LOCK_ROUNDS = 16


class PgDialect(Dialect):
    """Transactions on ``db``'s pool."""

    #: Under READ COMMITTED an UPDATE that waited for a rotation's commit matches nothing
    #: (its row ended) and cannot see the continuation: each round is a new statement.
    carrier_rounds = 8

    def __init__(self, db: PgDatabase, writer: PgWriter, clock: Callable[[], float] | None = None) -> None:
        self.queries = load_queries(DIALECT)
        self._db = db
        self._writer = writer
        self._clock = clock
        self.missing_session = (db.psycopg.errors.ForeignKeyViolation,)
        self.duplicate_session = (db.psycopg.errors.UniqueViolation,)

    def lock_session(self, cur: Any, session_id: str) -> Any:
        """The row, locked ``FOR UPDATE`` (``lock_session``): appends, retractions and
        compaction commits take the same lock, so they wait for this write."""
        row = cur.execute(self.queries["lock_session"], {"id": session_id, "now": self.clock()}).fetchone()
        if row is None:
            raise SessionNotFoundError(session_id)
        return row

    def read(self, what: str, session_id: str, work: Callable[[Any], T]) -> T:
        return self._db.run(what, work, readonly=True)

    def write(self, what: str, session_id: str, work: Callable[[Any], T], *, durable: bool = True) -> T:
        return self._db.run(what, work, durable=durable)

    def check_writable(self, what: str) -> None:
        self._db.check_writable(what)

    def submit_append(self, job: AppendJob) -> tuple[int, list[int], float]:
        """On the writer, which appends the jobs it holds with one statement."""
        return self._writer.submit(job)

    def submit_append_nowait(self, job: AppendJob, done: Done) -> bool:
        """On the writer; False for a keyed job (a transaction of its own, `keyed_append`)."""
        if job.keyed:
            return False
        self._writer.submit_nowait(job, done)
        return True

    def keyed_append(self, cur: Any, job: AppendJob) -> list[StoredMessage]:
        """Its keys claimed in key order (`persistence.postgres._keys`), the messages to
        write appended by the batch statement, its checks included."""
        q, psycopg = self.queries, self._db.psycopg

        def append_rows(cur: Any, fresh: Sequence[Mapping[str, Any]]) -> list[int]:
            written = job._replace(params=fresh)
            rows, wanted, turns = append_payload([written])
            # no deadline of its own: the transaction's COMMIT checks it
            now = self.clock()
            params = {"rows": rows, "wanted": wanted, "turns": turns, "until": None, "now": now}
            cur.execute(waiting_for_locks(q["append_batch"]), params)
            ids = [row["id"] for row in cur.fetchall()]
            if not ids:
                raise refusal(cur, q, written, psycopg, now)
            return ids

        return keyed_append(cur, q, job.session_id, job.params, job.incarnation, job.turn, append_rows)

    def lock_lineage(self, cur: Any, session_id: str) -> list[str]:
        """Lock the lineage's lease and session rows (lease rows first, as a commit
        does) until it stops growing: a rotation committing meanwhile adds a child."""
        ids = lineage_ids(cur, self.queries, session_id)
        for _ in range(_MAX_LOCK_ROUNDS):
            cur.execute(self.queries["lock_lineage_leases"], {"ids": ids})
            cur.execute(self.queries["lock_lineage_sessions"], {"ids": ids})
            again = lineage_ids(cur, self.queries, session_id)
            if set(again) <= set(ids):
                return again
            ids = sorted(set(ids) | set(again))
        raise SessionEndedError(session_id, None, None, f"the lineage of {session_id!r} kept growing")

    def lock_live_tip(self, cur: Any, session_id: str, incarnation: str | None = None) -> Any:
        return lock_live_tip(cur, self.queries, session_id, incarnation, self.clock())

    def insert_sessions(self, cur: Any, rows: list[tuple[str, str, str, str]]) -> dict[str, Any]:
        """With one statement, in id order (every writer's lock order)."""
        return create_many(cur, self.queries, sorted(rows), now=self.clock())

    def grouped_create(self, session_id: str, source: str, metadata: str, incarnation: str) -> Any:
        """On the writer, which inserts the plain creates it holds with one statement."""
        self._db.check_writable("create_session")
        return self._writer.submit(CreateJob(session_id, source, metadata, incarnation))

    def insert_child(self, cur: Any, parent: Any, child_id: str) -> None:
        params = {
            "session_id": child_id,
            "source": parent["source"],
            "parent_session_id": parent["id"],
            "now": self.clock(),
        }
        cur.execute(self.queries["insert_child"], params)

    def insert_compacted(
        self, cur: Any, target: str, first_seq: int, params: Sequence[Mapping[str, Any]], tail: Sequence[Any]
    ) -> None:
        insert_compacted(cur, self.queries, target, first_seq, params, tail, self.clock())

    def compaction_committed(self, cur: Any, record: CompactionRecord) -> None:
        """NOTIFY listeners on every host (`CompactionListener`), sent on COMMIT only."""
        notify_compaction(cur, self.queries, record)

    def turn_tokens_fenced(self) -> bool:
        """False: an open commits durably. Its token comes from a sequence whose advance
        an unflushed commit may lose in a server crash, which the holder (a client
        elsewhere) outlives."""
        return False

    def new_turn_token(self, cur: Any) -> None:
        """None: ``open_turn`` draws it from the ``turn_tokens`` sequence."""
        return None

    def turn_closed(self, cur: Any, session_id: str) -> None:
        """NOTIFY registries on every host (delivered on COMMIT only)."""
        cur.execute(self.queries["notify_turn_closed"], {"session_id": session_id})

    def insert_branch(
        self, cur: Any, origin: Any, new_id: str, metadata: str | None, at_seq: int, params: list[dict[str, Any]]
    ) -> None:
        insert_branch(cur, self.queries, origin, new_id, metadata, at_seq, params, self.clock())

    def search_hits(self, cur: Any, args: SearchArgs) -> list[SearchHit]:
        return search(cur, self.queries, args)

    def id_list(self, ids: list[Any]) -> list[Any]:
        return ids

    def clock(self) -> float | None:
        """The store's clock when it was given one (the testing harness's virtual
        clock), else None: every statement reads ``clock_timestamp()`` (see
        `persistence.postgres._store`)."""
        return None if self._clock is None else float(self._clock())
