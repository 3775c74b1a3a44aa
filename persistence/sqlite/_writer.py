"""Group commit: one writer thread runs queued write requests in shared transactions.

Each request is a function of a connection. The writer takes every request
queued so far (up to ``max_batch``), runs them in one ``BEGIN IMMEDIATE ...
COMMIT`` and releases each caller only after the COMMIT that holds its rows.
Requests rarely fail, so a batch first runs straight through (consecutive
appends in bulk). If anything fails, that transaction is rolled back and the
batch replayed in a new one with a SAVEPOINT per request: the failing request
is undone alone and the rest of the batch commits.

Releasing callers is where the time goes once fsync is fast: every woken caller
wants the GIL, which the writer needs between its statements. So the callers of
a committed batch are released in a few chains (`_Request`), right after its
COMMIT: they run while the writer builds the next batch. (Holding them until
that batch is about to COMMIT, so they would run while the writer waits on the
disk, measured 5-16% slower from 64 threads: each caller's round trip grows by
a whole batch, and with a fixed number of callers the rate is callers per round
trip.)

A request submitted with `GroupCommitWriter.submit_nowait` has no waiting
thread: the writer completes it itself once the batch that holds it has its
outcome, and then calls each distinct wake-up the completions returned, once
(an event loop submits this way: one wake-up of the loop serves a whole batch,
see `actors._reply.LoopReplies`). Their completions are held, when more requests
are already queued, until the next batch is about to COMMIT: an event loop runs
every task it wakes in one stretch that keeps the GIL, and the writer cannot run
a statement of the next batch until that stretch ends, so a loop woken right
after a COMMIT and the writer take turns; woken just before the next COMMIT, the
loop runs its tasks while the writer waits on the disk
(measured 1.06-1.22x for ``append_async`` on a 2-core VM when it was introduced).
Only a batch of appends (a bulk run, short and bounded) may hold answers: they
are released at once when the queue is empty, when the next batch holds any
other request, fails or retries, and on close. When every task of a loop waits on
the same batch, holding answers has nothing to overlap: the loop idles while the
batch is written, the writer while the loop runs. So the batch that holds every
answer owed is written in two halves (`GroupCommitWriter._parts`, while commits
are short): the loop runs the first half's tasks while the second is written,
and the halves go on taking turns (1.19x ``append_async`` from 64 tasks when it
was introduced).

A batch of appends that one statement can write (see `AloneWrites`) runs as that
statement alone, outside a transaction: SQLite makes it a transaction of its own,
the COMMIT and its fsync inside it, so the writer lets go of the GIL and waits to
win it back once for the batch instead of three times (BEGIN, INSERT, COMMIT).

A request submitted with ``durable=False`` (a turn's open, renew or close) may
commit without fsync: a batch made only of such requests runs under ``PRAGMA
synchronous = NORMAL`` and the store's own level is set again right after it. WAL
frames are written in commit order, so the next durable commit's fsync (the
turn's first append, any process's) makes it durable too; a process killed
meanwhile loses nothing (the page cache holds it), only an OS crash can.

With ``group_commit=False`` there is no writer thread: each caller runs its own
``BEGIN IMMEDIATE ... COMMIT`` on the shared connection, in its own thread,
one caller at a time (an in-process mutex; other processes still meet at the
SQLite write lock). That is one transaction per request, the plain design.
"""

from __future__ import annotations

import logging
import os
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from protocol import (
    ReadOnlyStoreError,
    StorageFullError,
    StoreBusyError,
    StoreReplacedError,
    TranscriptError,
)

from .. import _hooks as hooks
from .. import _telemetry as telemetry
from .._batching import drain, fill_batch, linked_chains
from .._latch import Latch
from .._store import WriteStats
from .._submitted import woken
from ._driver import is_busy, map_sqlite_error

__all__ = ["DoneFn", "GroupCommitWriter", "ReadOnlyWriter", "Wake", "WriteFn"]

logger = logging.getLogger("session_actors.sqlite_writer")

WriteFn = Callable[[sqlite3.Connection], Any]
#: A submitted request's completion: ``on_done(result, error)``, on the writer thread;
#: it may return a wake-up, which the writer calls once for all requests of a batch
#: that returned it (to wake their consumer once, not once per request).
Wake = Callable[[], None]
DoneFn = Callable[[Any, "BaseException | None"], "Wake | None"]
#: Runs many jobs at once; returns one result per job, or None when it cannot
#: (then every request of the batch runs alone, with its own savepoint).
BulkFn = Callable[[sqlite3.Connection, list[Any]], "list[Any] | None"]
#: Runs one job alone: what a request with a job and no ``fn`` runs when it is not
#: part of a bulk run (a lone request, or a replay).
OneFn = Callable[[sqlite3.Connection, Any], Any]


class AloneWrites(Protocol):
    """Append batches one statement can write outside any transaction (a store's):
    `planned` says whether it can, writing nothing; `write` runs that statement,
    committed when it returns, and returns one result per job, or None when it
    wrote nothing after all (the batch then runs in a transaction as usual)."""

    def planned(self, jobs: list[Any]) -> Any | None: ...

    def write(self, conn: sqlite3.Connection, plan: Any) -> list[Any] | None: ...


_STOP = object()
#: A batch that holds every answer the writer owes its submitters (nothing held from
#: the batch before) is split in two halves when it has at least twice this many
#: submitted appends, while the last commit waited less than half the time its
#: consumers took to send the batch (`GroupCommitWriter._parts`).
_SPLIT_MIN_HALF = 8
_monotonic = time.monotonic
_new_lock = threading.Lock
_COMMITTED, _ROLLED_BACK, _REPLAY, _GAVE_UP = object(), object(), object(), object()
_NORMAL = 1  # PRAGMA synchronous: syncs at checkpoints only, in WAL mode


class _Request:
    """One queued write. ``done`` is a `Latch` held until the outcome is set (much
    cheaper than an Event for thousands of waiters, and its wake-up lets go of the GIL).

    Callers of a committed batch are released in a few chains
    (`batching.linked_chains`): the writer releases each chain's first, and each
    caller releases the next of its chain as soon as it wakes. Waking them all at
    once would make dozens of threads fight over the GIL (and the writer, which
    needs it for the next batch) at the same moment; the chains wake them a few
    at a time while the writer goes on. ``claim`` makes the
    release one-shot, so the writer can sweep a stalled chain safely.

    A submitted request (``on_done``) has neither lock: only the writer thread
    completes it, once (``on_done`` is cleared). Fewer objects per request matter
    here: an event loop keeps dozens of submitted requests alive at a time, and
    every container that outlives a garbage collection pass is promoted, which
    brings on full collections (whose cost grows with the application's heap).
    """

    __slots__ = (
        "fn",
        "session_id",
        "job",
        "what",
        "submitted",
        "deadline",
        "done",
        "claim",
        "next",
        "result",
        "error",
        "on_done",
        "durable",
    )

    def __init__(
        self,
        fn: WriteFn | None,
        session_id: str,
        job: Any,
        what: str,
        patience_s: float,
        on_done: DoneFn | None = None,
        *,
        waited: bool = True,
        durable: bool = True,
    ) -> None:
        # One per write, built on the caller's thread under the GIL every other caller
        # waits for: module-level names, no attribute read back.
        self.fn = fn  # None: a job the writer runs with its ``one`` function
        self.on_done = on_done  # no waiting thread: the writer completes it (submit_nowait)
        self.submitted = submitted = _monotonic()
        self.deadline = submitted + patience_s  # for the whole call, queueing included
        self.session_id = session_id
        self.job = job
        self.what = what  # the store method, for test-only kill points
        self.durable = durable  # False: its commit need not wait for the disk
        if on_done is None and waited:
            self.done = Latch()
            self.claim = _new_lock()
        else:  # completed by the writer, or run by its own caller (``waited=False``)
            self.done = self.claim = None  # type: ignore[assignment]  # never waited on
        self.next: _Request | None = None  # the caller to release after this one
        self.result: Any = None
        self.error: BaseException | None = None

    def release(self) -> None:
        """Let the caller go (its outcome is set), or complete a submitted request.
        Only the first call counts."""
        claim = self.claim
        if claim is not None:
            if claim.acquire(False):
                self.done.set()
            return
        wake = self.complete()
        if wake is not None:
            woken([wake], logger)

    def complete(self) -> Wake | None:
        """A submitted request: run ``on_done`` (once, on the writer thread); returns
        its wake-up."""
        on_done = self.on_done
        if on_done is None:
            return None
        self.on_done = None
        try:
            return on_done(self.result, self.error)
        except BaseException:  # never let the writer die of a completion
            logger.exception("completing a submitted %s failed", self.what)
            return None

    def wait(self) -> None:
        """Block until released, then release the next caller of the batch."""
        self.done.wait()
        successor = self.next
        if successor is not None:
            successor.release()


class GroupCommitWriter:
    """The single writer of one store: every write of this process goes through it,
    queued for the writer thread, or (``group_commit=False``) run by its caller."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        patience_s: float,
        max_batch: int,
        name: str,
        bulk: BulkFn | None = None,
        one: OneFn | None = None,
        alone: AloneWrites | None = None,
        group_commit: bool = True,
        path: str = "?",
        on_full: Callable[[], bool] | None = None,
    ) -> None:
        self._conn = conn
        self._bulk = bulk
        self._one = one
        self._alone = alone
        self._patience_s = patience_s
        self._path = path
        # the file this store opened (device, inode): writes refuse any other (see `_moved`);
        # absolute, so that a chdir of the process is not taken for a replaced file
        self._abspath = os.path.abspath(path)
        self._identity = _identity(self._abspath)
        self._on_full = on_full  # after a write failed for space (the store checkpoints)
        self._checkpoint_pending = False  # until a checkpoint after a full disk succeeds
        self._max_batch = max_batch
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()  # closing vs submitting
        self._closed = False
        self._transactions = 0  # committed batches
        self._requests = 0  # requests those batches held
        self._in_flight = 0  # size of the batch being attempted
        self._held_submitted: list[_Request] = []  # its submitted requests, not yet completed
        self._answered_at = 0.0  # when submitted answers were last completed (see `_parts`)
        self._commit_wait = 0.0  # what the last statement written alone waited, in s
        # the store's synchronous level, set again after each batch committed without
        # fsync (only where it syncs: OFF and NORMAL never wait for the disk anyway)
        self._synchronous = int(conn.execute("PRAGMA synchronous").fetchone()[0])
        self._relaxable = self._synchronous > _NORMAL
        self._unsynced = 0  # committed batches of non-durable requests only
        self._relaxed_left = False  # a failed ROLLBACK kept the level from being set again
        # group_commit=False: callers take turns on the connection instead of queueing
        self._direct = None if group_commit else threading.Lock()
        self._thread = None
        if group_commit:
            self._thread = threading.Thread(target=self._run, name=name, daemon=True)
            self._thread.start()

    def submit(
        self, fn: WriteFn | None, session_id: str = "?", *, job: Any = None, what: str = "write", durable: bool = True
    ) -> Any:
        """Run ``fn(conn)`` in a write transaction; return its result once committed
        (``durable=False``: maybe not yet synced, see the module docstring).

        A request with a ``job`` may instead run together with neighbouring jobs
        through the writer's ``bulk`` function, which must return what ``fn``
        would have returned for each; with a job, ``fn`` may be None: the job then
        runs alone through the writer's ``one`` function.
        Raises what ``fn`` raised (driver errors mapped to ours), or `StoreBusyError`.
        """
        # a direct request runs on this thread: nobody waits for it on a latch
        request = _Request(fn, session_id, job, what, self._patience_s, waited=self._direct is None, durable=durable)
        if self._direct is not None:
            # held by close() too: no write outlives the store; waiting for it counts
            # against the patience budget like queueing does
            if not self._direct.acquire(timeout=max(0.0, request.deadline - time.monotonic())):
                raise self._busy(request, "another caller's transaction of this store")
            try:
                if self._closed:
                    raise TranscriptError("the store is closed")
                self._run_batch([request])  # our own transaction, in this thread
            finally:
                self._direct.release()
        else:
            with self._lock:
                if self._closed:
                    request.done.close()
                    raise TranscriptError("the store is closed")
                self._queue.put(request)
            request.wait()
        error = request.error
        if error is not None:
            raise error
        return request.result

    def submit_nowait(
        self, fn: WriteFn | None, session_id: str, *, job: Any = None, what: str = "write", on_done: DoneFn
    ) -> bool:
        """Queue ``fn`` like `submit` without waiting: ``on_done(result, error)`` is
        called once, on the writer thread, when the batch holding it has committed
        (or the request failed alone); it must be quick and must not block on this
        store. It may return a wake-up (`Wake`): the writer calls each distinct one
        once, after completing the whole batch. False (nothing queued) when there is
        no writer thread to complete it (``group_commit=False``): use `submit`."""
        if self._direct is not None:
            return False
        request = _Request(fn, session_id, job, what, self._patience_s, on_done)
        with self._lock:
            if self._closed:
                raise TranscriptError("the store is closed")
            self._queue.put(request)
        return True

    def stats(self) -> WriteStats:
        return WriteStats(self._transactions, self._requests, self._in_flight, self._queue.qsize(), self._unsynced)

    def close(self) -> None:
        """Finish queued requests, then stop the thread. Idempotent."""
        if self._direct is not None:
            with self._direct:  # waits for the write in progress
                self._closed = True
            return
        with self._lock:
            if not self._closed:
                self._closed = True
                self._queue.put(_STOP)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    # -- writer thread ----------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        released: list[_Request] = []  # the last batch's waiting callers, whom its chains release
        try:
            while not stopping:
                try:
                    batch = [self._queue.get_nowait()]
                except queue.Empty:
                    self._release_held()
                    _sweep(released)  # idle: nobody may wait on a stalled chain meanwhile
                    batch = [self._queue.get()]
                fill_batch(self._queue, batch, self._max_batch)
                if _STOP in batch:
                    stopping = True
                    batch = [r for r in batch if r is not _STOP] + drain(self._queue, _STOP)
                for part in self._parts(batch) if batch else ():
                    try:
                        part = self._run_batch(part)
                    finally:
                        # the previous chain has had a whole batch to finish: release
                        # whoever is still waiting in it (a caller interrupted while waiting)
                        self._release_held()
                        _sweep(released)
                        released = self._hold(part)  # see the module docstring
        finally:
            self._release_held()
            _sweep(released)

    def _hold(self, batch: list[_Request]) -> list[_Request]:
        """A finished batch's answers: its waiting callers are released now (in chains),
        its submitted requests' completions kept for `_release_held` (see the module
        docstring). Returns the waiting callers, for `_sweep` to release whoever a
        stalled chain left (submitted requests are completed by `_release_held`,
        never swept)."""
        waiting: list[_Request] = []
        submitted: list[_Request] = []
        for request in batch:
            (submitted if request.claim is None else waiting).append(request)
        for head in linked_chains(waiting):
            head.release()
        self._held_submitted = submitted
        return waiting

    def _parts(self, batch: list[_Request]) -> list[list[_Request]]:
        """``batch``, or its two halves when it is every answer the writer owes its
        submitters (see `_SPLIT_MIN_HALF`): then the consumers run the first half's
        answers while the second half is written, and the two halves go on as two
        groups that take turns. Only while a commit waits less than half the time the
        consumers took to send the batch: with a slow disk the second fsync costs more
        than the overlap gains."""
        if (
            len(batch) < 2 * _SPLIT_MIN_HALF
            or self._held_submitted
            or self._alone is None
            or not all(r.on_done is not None and r.job is not None for r in batch)
        ):
            return [batch]
        if self._commit_wait >= (_monotonic() - self._answered_at) / 2:
            return [batch]
        half = len(batch) // 2
        return [batch[:half], batch[half:]]

    def _release_held(self) -> None:
        """Complete the held submitted requests (their consumers woken once each)."""
        submitted, self._held_submitted = self._held_submitted, []
        if submitted:
            _completed(submitted)
            self._answered_at = _monotonic()

    def _run_batch(self, batch: list[_Request]) -> list[_Request]:
        """Run ``batch`` to an outcome for each request; returns the requests that were
        still in it at the end (one past its deadline was failed and released at once)."""
        live = self._expired_dropped(batch, None)  # waited out its patience in the queue
        if not live:
            return live
        moved = self._moved()
        if moved is not None:  # an open connection would write on into a file nobody reads
            logger.error("%s", moved)
            for request in live:
                request.error = moved
            return live
        if self._checkpoint_pending and self._on_full is not None:  # room again, maybe
            self._release_held()  # a checkpoint may take long: nobody waits on it for an answer
            self._checkpoint_pending = not self._on_full()
        self._in_flight = len(live)
        try:
            outcome, live = self._retrying(live, isolate=False)
            if outcome is _REPLAY:  # a request failed: run each alone, in a new transaction
                outcome, live = self._retrying(live, isolate=True)
            if outcome is _COMMITTED:
                self._transactions += 1
                self._requests += len(live)
        except sqlite3.Error as exc:
            logger.error("write batch of %d failed: %s", len(live), exc)
            for request in live:
                request.error = _mapped(exc, request.session_id)
        except BaseException as exc:  # never let the writer die with callers waiting
            logger.exception("write batch crashed")
            for request in live:
                request.error = TranscriptError(f"write failed: {exc!r}")
        finally:
            self._in_flight = 0
        if self._on_full is not None and any(isinstance(r.error, StorageFullError) for r in live):
            self._checkpoint_pending = not self._on_full()
        return live

    def _moved(self) -> StoreReplacedError | None:
        """The error for a database file deleted or replaced since the store opened it
        (one stat a batch), or None."""
        if self._identity is None:
            return None
        now = _identity(self._abspath)
        if now == self._identity:
            return None
        what = "deleted" if now is None else "replaced by another file"
        return StoreReplacedError(
            f"the database file {self._path!r} was {what} while this store had it open; nothing was written "
            "(reopen the store)"
        )

    def _retrying(self, live: list[_Request], *, isolate: bool) -> tuple[object, list[_Request]]:
        """`_attempt` until it is not busy, dropping each request whose deadline has
        passed (`StoreBusyError`, nothing written); ``(_GAVE_UP, [])`` when none is left."""
        delay = 0.001
        while True:
            try:
                return self._attempt(live, isolate=isolate), live
            except sqlite3.OperationalError as exc:
                if not is_busy(exc):
                    raise
                telemetry.busy_retry()
                live = self._expired_dropped(live, exc)
                if not live:
                    return _GAVE_UP, live
            remaining = min(r.deadline for r in live) - time.monotonic()
            # full jitter keeps competing processes from retrying in lockstep
            time.sleep(max(0.0, min(remaining, random.uniform(0, delay))))
            delay = min(delay * 2, 0.05)

    def _expired_dropped(self, requests: list[_Request], cause: BaseException | None) -> list[_Request]:
        """Fail and release the requests past their deadline; the others, in order."""
        now = time.monotonic()
        live = []
        for request in requests:
            if now < request.deadline:
                live.append(request)
                continue
            request.result, request.error = None, self._busy(request, "another connection")
            request.error.__cause__ = cause
            request.release()
        if len(live) < len(requests):
            logger.warning(
                "%d write(s) gave up: %s", len(requests) - len(live), self._busy(requests[0], "another connection")
            )
        return live

    def _busy(self, request: _Request, holder: str) -> StoreBusyError:
        waited = time.monotonic() - request.submitted
        return StoreBusyError(
            f"{request.what}: the SQLite write lock on {self._path!r} was held by {holder}; "
            f"waited {waited:.1f}s (patience_s={self._patience_s:g}); nothing was written"
        )

    def _attempt(self, batch: list[_Request], *, isolate: bool) -> object:
        """One try at the batch: `_COMMITTED`, `_ROLLED_BACK` (a lone request failed)
        or `_REPLAY` (one of several failed: run again with ``isolate``). Raises
        sqlite3 busy errors for a retry.

        Savepoints are costly here (SQLite journals every page they touch), so the
        batch first runs straight through; only a replay gives each request its own.
        """
        conn = self._conn
        if conn.in_transaction:  # a failed ROLLBACK (disk full) left one open: end it first
            conn.execute("ROLLBACK")
        if self._relaxed_left:
            self._relaxed_left = self._synced_again(conn)
        relaxed = self._relaxable and not any(r.durable for r in batch)
        try:
            hooks.point("before_begin", [r.what for r in batch])
            plan = None
            if not isolate and self._alone is not None and self._only_appends(batch):
                plan = self._alone.planned([r.job for r in batch])
            if plan is not None and self._wrote_alone(conn, batch, plan):
                return _COMMITTED
            # BEGIN and COMMIT each let go of the GIL once this way (`execute` does so five
            # times a statement, and under many callers each time costs the writer a wait
            # to get it back): 2-4.5% more appends/s from 64 threads in three alternating runs
            # no transaction is open here (above); the level cannot change inside one
            conn.executescript("PRAGMA synchronous = NORMAL; BEGIN IMMEDIATE" if relaxed else "BEGIN IMMEDIATE")
            if isolate or not self._only_appends(batch):
                self._release_held()  # only a bulk append run, short and bounded, may hold them
            if isolate:
                for request in batch:
                    self._run_isolated(conn, request)
            elif not self._run_plain(conn, batch):
                conn.execute("ROLLBACK")
                return _ROLLED_BACK if len(batch) == 1 else _REPLAY  # a lone request's error is set
            self._release_held()  # the previous batch's callers run while we fsync
            hooks.point("before_commit", [r.what for r in batch])
            conn.commit()
            self._unsynced += relaxed
            hooks.point("after_commit", [r.what for r in batch])
            return _COMMITTED
        except BaseException:
            self._release_held()  # they never wait on our retries
            if conn.in_transaction:
                try:
                    conn.execute("ROLLBACK")
                except sqlite3.Error as rollback_error:  # retried before the next BEGIN
                    logger.warning("ROLLBACK failed: %s", rollback_error)
            for request in batch:  # a retry starts from a clean slate
                request.result, request.error = None, None
            raise
        finally:
            if relaxed:
                self._relaxed_left = self._synced_again(conn)

    def _synced_again(self, conn: sqlite3.Connection) -> bool:
        """Set the store's synchronous level again; True when a transaction a failed
        ROLLBACK left open keeps it from being set (the next attempt tries again)."""
        if conn.in_transaction:
            return True
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        return False

    def _wrote_alone(self, conn: sqlite3.Connection, batch: list[_Request], plan: Any) -> bool:
        """Write an append batch as the one statement ``plan`` stands for, outside a
        transaction; False when it wrote nothing (the batch then runs in one)."""
        assert self._alone is not None
        self._release_held()  # the statement holds the COMMIT's fsync: the loop runs meanwhile
        began, cpu_began = _monotonic(), time.thread_time()
        hooks.point("before_commit", [r.what for r in batch])  # nothing is written yet: COMMIT is the statement itself
        try:
            results = self._alone.write(conn, plan)
            # what the commit waited (its fsync, mostly; a test's fault at the commit point
            # too): see `_parts`
            self._commit_wait = (_monotonic() - began) - (time.thread_time() - cpu_began)
        except sqlite3.Error as exc:
            if is_busy(exc):
                raise  # the whole batch retries
            # undone with its statement: the transaction path pins the failure down
            logger.debug("a batch of %d written alone failed, running it in a transaction: %s", len(batch), exc)
            return False
        if results is None:
            return False
        for request, result in zip(batch, results, strict=True):
            request.result = result
        hooks.point("after_commit", [r.what for r in batch])
        return True

    def _only_appends(self, batch: list[_Request]) -> bool:
        return self._bulk is not None and all(r.job is not None for r in batch)

    def _run_plain(self, conn: sqlite3.Connection, batch: list[_Request]) -> bool:
        """Run the batch without savepoints, consecutive jobs in bulk. False at the
        first failure (results cleared; the error recorded when one request is to blame)."""
        index, blame = 0, None
        try:
            while index < len(batch):
                run = _job_run(batch, index)
                if len(run) >= 2 and self._bulk is not None:
                    blame = None  # a bulk failure is pinned down by the replay
                    results = self._bulk(conn, [r.job for r in run])
                    if results is None:
                        raise _BulkRefused
                    for request, result in zip(run, results, strict=True):
                        request.result = result
                    index += len(run)
                else:
                    blame = batch[index]
                    blame.result = self._run_one(conn, blame)
                    index += 1
        except Exception as exc:
            if is_busy(exc):
                raise  # the whole batch retries
            for other in batch:
                other.result, other.error = None, None
            if blame is not None and not isinstance(exc, _BulkRefused):
                blame.error = _as_ours(exc, blame.session_id)
            return False
        return True

    def _run_one(self, conn: sqlite3.Connection, request: _Request) -> Any:
        """A request's own write: its ``fn``, or (a job without one) the writer's ``one``."""
        fn = request.fn
        if fn is None:
            assert self._one is not None, "a request without fn needs a writer with `one`"
            return self._one(conn, request.job)
        return fn(conn)

    def _run_isolated(self, conn: sqlite3.Connection, request: _Request) -> None:
        conn.execute("SAVEPOINT request")
        try:
            request.result, request.error = self._run_one(conn, request), None
        except Exception as exc:
            if is_busy(exc):
                raise  # the whole batch retries
            conn.execute("ROLLBACK TO request")
            request.result, request.error = None, _as_ours(exc, request.session_id)
        conn.execute("RELEASE request")


class ReadOnlyWriter:
    """The writer of a read-only store: every write is refused before it starts."""

    def __init__(self, path: str) -> None:
        self._path = path

    def submit(
        self, fn: WriteFn | None, session_id: str = "?", *, job: Any = None, what: str = "write", durable: bool = True
    ) -> Any:
        if what == "write":  # unnamed: the store method's name from its transaction body
            what = getattr(fn, "__qualname__", "").split(".<locals>", 1)[0].rsplit(".", 1)[-1] or what
        raise ReadOnlyStoreError(what, f"{what}: {self._path!r} was opened read-only")

    def submit_nowait(
        self, fn: WriteFn | None, session_id: str = "?", *, job: Any = None, what: str = "write", on_done: DoneFn
    ) -> bool:
        return self.submit(fn, session_id, job=job, what=what)  # raises: nothing is queued

    def stats(self) -> WriteStats:
        return WriteStats(0, 0, 0, 0)

    def close(self) -> None:
        pass


class _BulkRefused(Exception):
    """The bulk function declined the run: replay request by request."""


def _completed(submitted: list[_Request]) -> None:
    """Complete submitted requests (their outcome is final), then call each distinct
    wake-up they returned, once, in order."""
    wakes: dict[Wake, None] = {}
    for request in submitted:
        wake = request.complete()
        if wake is not None:
            wakes[wake] = None
    woken(wakes, logger)


def _sweep(batch: list[_Request]) -> None:
    for request in batch:
        request.release()


def _identity(path: str) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of ``path``, None when it does not exist."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_dev, stat.st_ino


def _job_run(batch: list[_Request], start: int) -> list[_Request]:
    """The requests from ``start`` on that carry jobs a bulk run may hold (empty if
    ``start``'s does not: a keyed append runs alone, it reads and claims its keys)."""
    end = start
    while end < len(batch) and batch[end].job is not None and not getattr(batch[end].job, "keyed", False):
        end += 1
    return batch[start:end]


def _as_ours(exc: Exception, session_id: str) -> Exception:
    """Driver errors become ours (chained); our own errors pass through."""
    if isinstance(exc, sqlite3.Error):
        return _mapped(exc, session_id)
    return exc


def _mapped(exc: sqlite3.Error, session_id: str) -> TranscriptError:
    mapped = map_sqlite_error(exc, session_id)
    mapped.__cause__ = exc
    return mapped
