"""The group-commit writer's pipeline: the next batch is sent while the last one commits.

libpq's pipeline mode on the writer's own connection. Each batch is one
Bind/Execute of a prepared statement followed by its own Sync, so each is its own
implicit transaction, committed when the server reaches that Sync. The
statement's rows arrive before its commit (the WAL flush); the writer then sends
the next batch, which the server starts as soon as the flush is done, instead of
idling while the writer takes the rows back, releases the callers and builds the
next batch. A batch counts as committed only when its Sync has been answered.

Only the libpq calls live here (psycopg's own pipeline waits for every result
queued, which would wait for the next batch too); the writer decides what to send.
"""

from __future__ import annotations

import re
import select
from collections import deque
from typing import Any

__all__ = ["AppendPipeline", "numbered_placeholders", "socket_ready"]

#: The batch statement's name on the writer's connection.
STATEMENT = b"session_actors_append_batch"
#: A late batch's own timeouts, in its transaction (the statement after it).
_SET_LOCAL_TIMEOUTS = b"SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $1, true)"


def socket_ready(fd: int, *, write: bool = False, timeout_s: float | None = None) -> bool:
    """Wait until ``fd`` can be read (or, with ``write``, written), at most
    ``timeout_s`` (None: no limit); whether it can be read now (an error or hang-up
    counts: reading reports it). poll, not select: select() refuses descriptors from
    1024 up (ValueError), which a process with many files and sockets open reaches."""
    poller = select.poll()
    poller.register(fd, select.POLLIN | (select.POLLOUT if write else 0))
    events = poller.poll(None if timeout_s is None else timeout_s * 1000)
    return any(mask & _READABLE for _, mask in events)


_READABLE = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP | select.POLLNVAL


def numbered_placeholders(sql: str, names: tuple[str, ...]) -> bytes:
    """``sql`` with psycopg's ``%(name)s`` placeholders as libpq's ``$1``, ``$2``, ...
    (in ``names`` order) and ``%%`` as ``%``."""

    def number(match: re.Match[str]) -> str:
        return "%" if match.group(0) == "%%" else f"${names.index(match.group(1)) + 1}"

    return re.sub(r"%%|%\((\w+)\)s", number, sql).encode()


class AppendPipeline:
    """Batch statements in flight on one connection, answered oldest first.

    `send` queues a batch; `rows` waits for the oldest one's statement result,
    `committed` for its Sync. A server error raises the psycopg error of its
    SQLSTATE (the transaction is rolled back: the server skips to that batch's
    Sync, and batches after it run normally); a lost connection raises
    ``OperationalError``. Between batches (nothing in flight) the connection is
    left out of pipeline mode, usable by ordinary psycopg calls again.
    """

    def __init__(self, conn: Any, sql: bytes, psycopg: Any) -> None:
        self.conn = conn
        self._pg = conn.pgconn
        self._psycopg = psycopg
        self._ok = psycopg.pq.ExecStatus
        self._bad = psycopg.pq.ConnStatus.BAD
        self._sqlstate = psycopg.pq.DiagnosticField.SQLSTATE
        self._encoding = conn.info.encoding  # the client encoding (a LATIN1 database, PGCLIENTENCODING)
        self._stages: deque[str] = deque()  # per batch in flight: "rows", then "sync"
        result = self._pg.prepare(STATEMENT, sql)
        if result.status != self._ok.COMMAND_OK:
            raise self._error(result)

    @property
    def in_flight(self) -> int:
        return len(self._stages)

    def send(
        self, rows: bytes, wanted: bytes, turns: bytes, until: bytes, now: bytes | None, timeout_ms: int | None = None
    ) -> None:
        """Queue one batch statement and its Sync, and send them; ``now``: the store's
        clock (None: the server's); ``timeout_ms``: its lock_timeout and
        statement_timeout, set for its transaction alone. If this
        raises, the Sync did not leave (it is the last thing written): the server
        rolls the batch back when it sees the connection gone."""
        pg = self._pg
        if not self._stages:
            pg.enter_pipeline_mode()
        if timeout_ms is None:
            self._stages.append("rows")
        else:
            self._stages.append("timeouts")
            pg.send_query_params(_SET_LOCAL_TIMEOUTS, [f"{timeout_ms}ms".encode()])
        pg.send_query_prepared(STATEMENT, [rows, wanted, turns, until, now])
        pg.send_flush_request()  # the rows are sent before the commit, not held back with its answer
        pg.pipeline_sync()
        while pg.flush():  # 1: more to send; read meanwhile, the server may be writing to us
            if socket_ready(pg.socket, write=True):
                pg.consume_input()

    def rows(self) -> list[tuple[int, str, int, float]]:
        """The oldest batch's statement result: ``(id, session_id, seq, created_at)``
        rows. It is not committed yet: see `committed`."""
        assert self._stages and self._stages[0] in ("rows", "timeouts")
        if self._stages[0] == "timeouts":
            result = self._next_result()
            if result.status != self._ok.TUPLES_OK:
                raise self._failed(result)
            self._next_result(end=True)
            self._stages[0] = "rows"
        result = self._next_result()
        if result.status != self._ok.TUPLES_OK:
            raise self._failed(result)
        if self._next_result(end=True) is not None:
            raise self._lost("more than one result for a batch statement")
        self._stages[0] = "sync"
        get = result.get_value
        return [
            (int(get(i, 0)), get(i, 1).decode(self._encoding), int(get(i, 2)), float(get(i, 3)))
            for i in range(result.ntuples)
        ]

    def committed(self) -> None:
        """Wait for the oldest batch's Sync: its transaction committed (or raise)."""
        assert self._stages and self._stages[0] == "sync"
        result = self._next_result()
        if result.status != self._ok.PIPELINE_SYNC:  # the commit failed
            raise self._failed(result)
        self._done()

    def close(self) -> None:
        """Forget what is in flight (the connection is being closed)."""
        self._stages.clear()

    # -- libpq ----------------------------------------------------------------------

    def _failed(self, result: Any) -> Exception:
        """The error of a failed batch, after reading up to its Sync (the server
        skips there). If the connection is gone meanwhile, the error still says
        what happened to this batch (a termination, say)."""
        error = self._error(result)
        try:
            while (after := self._next_result(end=True)) is None or after.status != self._ok.PIPELINE_SYNC:
                pass
            self._done()
        except self._psycopg.OperationalError:
            self._stages.clear()
        return error

    def _done(self) -> None:
        self._stages.popleft()
        if not self._stages:
            self._pg.exit_pipeline_mode()

    def _next_result(self, *, end: bool = False) -> Any:
        """The next result (``end``: the end of the current one may be None)."""
        pg = self._pg
        while pg.is_busy():
            socket_ready(pg.socket)
            pg.consume_input()
        result = pg.get_result()
        if result is None:
            if not end or pg.status == self._bad:
                raise self._lost(pg.error_message)
        elif result.status == self._ok.FATAL_ERROR and not result.error_field(self._sqlstate):
            raise self._lost(result.error_message)  # libpq's own report of a broken connection
        return result

    def _lost(self, message: bytes | str) -> Exception:
        self._stages.clear()
        text = message.decode(errors="replace") if isinstance(message, bytes) else message
        return self._psycopg.OperationalError(f"connection lost with a pipeline in flight: {text}")

    def _error(self, result: Any) -> Exception:
        return self._psycopg.errors.error_from_result(result, encoding=self._encoding)
