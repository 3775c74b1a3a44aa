"""The worker side of ``simulate --chaos``: a worker that may die at any moment.

A chaos worker is a normal simulate worker (`run_worker` through the actors
gateway) with three differences. Every acknowledgement goes to its ledger
(`ledger.Ledger`, fsync'd) before the workload counts it, so what a killed worker
was told survives it. A restarted worker (the next *generation*) resumes its
share of the turns where the killed one stopped (the per-worker count of finished
turns lives in shared memory; a turn in flight at the kill runs again). And once
its share is done it keeps running more turns until the supervisor sets ``stop``:
a workload too short for the faults asked for keeps going until they happened.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

from protocol import Message, StoredMessage

from ._check import Ack
from ._config import WorkerConfig, session_ids
from ._ledger import Ledger, read_ledgers
from ._workload import Gateway, build_jobs, run_worker

__all__ = ["LedgerGateway", "chaos_worker_main", "ledger_acks", "remaining_jobs"]

#: Ledger line kind of one acknowledged append: ``["acks", root, [[id, text], ...]]``.
ACKS = "acks"


class LedgerGateway:
    """A gateway whose acknowledgements are in the ledger before the caller sees them."""

    def __init__(self, inner: Gateway, ledger: Ledger) -> None:
        self.inner = inner
        self.ledger = ledger

    def append(self, root: str, messages: Sequence[Message], *, review: bool = False) -> list[StoredMessage]:
        stored = self.inner.append(root, messages, review=review)
        self.ledger.record(ACKS, root, [[m.id, m.text] for m in stored])
        return stored

    def compress(self, root: str, mode: str) -> str:
        return self.inner.compress(root, mode)

    def compress_and_interrupt(self, root: str, mode: str) -> tuple[str, bool]:
        return self.inner.compress_and_interrupt(root, mode)

    def after_turn(self, root: str) -> None:
        self.inner.after_turn(root)

    def turn(self, root: str) -> AbstractContextManager[object]:
        return self.inner.turn(root)


def ledger_acks(paths: Iterable[str | os.PathLike[str]]) -> Iterator[Ack]:
    """Every acknowledgement in these ledgers (a torn last line was never counted)."""
    for line in read_ledgers(paths):
        if line[0] == ACKS:
            root = line[1]
            yield from (Ack(root, row_id, text) for row_id, text in line[2])


def remaining_jobs(config: WorkerConfig, finished: int, stop: Any) -> Iterator[tuple[str, int]]:
    """This worker's turns from the ``finished``-th on, then more rounds until ``stop``."""
    yield from build_jobs(config)[finished:]
    roots = session_ids(config.prefix, config.sessions)  # another worker's: compress only
    for turn in itertools.count(config.turns + config.worker, config.workers):
        for root in roots:
            if stop.value:
                return
            yield root, turn


def chaos_worker_main(config: WorkerConfig, ledger_path: str, result_path: str, finished: Any, stop: Any) -> None:
    """Entry point of a spawned chaos worker (one generation of worker ``config.worker``).

    ``finished`` is a lock-free shared array of finished turns per worker, ``stop``
    a lock-free shared flag: a worker killed while holding a lock would leave it
    held for everyone, so nothing shared here has one.
    """
    from ._gateways import open_gateway  # pykka and the registry, only when running

    index = config.worker
    local = threading.Lock()  # dies with the process, unlike a shared one

    def progress(n: int) -> None:
        with local:  # our slot has one writing process: the generation alive
            finished[index] += n

    with Ledger(ledger_path) as ledger, open_gateway(config) as gateway:
        jobs = remaining_jobs(config, finished[index], stop)
        result = run_worker(config, LedgerGateway(gateway, ledger), progress, jobs=jobs)
    result.acks = []  # the ledger holds them, for every generation alike
    with open(result_path, "w", encoding="utf-8") as fh:
        fh.write(result.to_json())
