"""The simulate engine: prepare the sessions, run the workers (threads, or spawned
processes on one database), check the store, and report as a plain dict.

The command line (options, progress bar, rendering) lives in `actors.cli._simulate`.
Each run's ids start with ``sim-<run id>-`` and only they are checked (see `check`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import wait as wait_for
from pathlib import Path
from typing import Any

from persistence import open_store
from protocol import Message

from ._chaos import run_chaos
from ._check import Ack, IntegrityReport, check_run
from ._config import WorkerConfig, session_ids
from ._workload import WorkerResult, run_worker

__all__ = ["process_main", "run_simulation"]

log = logging.getLogger("session_actors.simulate")

#: How often the parent refreshes the progress count while worker processes run.
_PROCESS_POLL_S = 0.1


def run_simulation(
    base: WorkerConfig, processes: int, *, advance: Callable[[int], None] | None = None, chaos_faults: int | None = None
) -> dict[str, Any]:
    """Prepare the sessions, run the workers, check the store; the report as a dict.

    ``advance(n)`` is called as turns complete (``sessions * turns`` in all).
    ``chaos_faults``: run the processes under `chaos` with at least that many faults.
    """
    roots = session_ids(base.prefix, base.sessions)
    prepared = _prepare(base.db, roots)
    started = time.monotonic()
    advance = advance or (lambda n: None)
    chaos = None
    if chaos_faults is not None:
        with tempfile.TemporaryDirectory(prefix="session-actors-chaos-") as tmp:
            result, chaos = run_chaos(base, processes, chaos_faults, Path(tmp), advance)
    elif processes == 1:
        result = _run_in_process(base, advance)
    else:
        result = _run_processes(base, processes, advance)
    elapsed = time.monotonic() - started
    result.acks += prepared
    store = open_store(base.db)
    try:
        integrity = check_run(store, base.prefix, roots, result.acks)
    finally:
        store.close()
    report = _report(base, processes, result, integrity, elapsed)
    if chaos is not None:
        report["chaos"] = chaos.to_dict()
    return report


def _prepare(db: str, roots: list[str]) -> list[Ack]:
    """Create the sessions (and the schema) once, before any worker starts."""
    store = open_store(db)
    acks = []
    try:
        for root in roots:
            store.create_session(root, source="sim")
            stored = store.append(root, Message("system", f"You are the assistant of {root}."))
            acks += [Ack(root, m.id, m.text) for m in stored]
    finally:
        store.close()
    return acks


def _run_in_process(config: WorkerConfig, advance: Callable[[int], None]) -> WorkerResult:
    from ._gateways import open_gateway  # pykka and the registry, only when running

    with open_gateway(config) as gateway:
        return run_worker(config, gateway, advance)


def _run_processes(base: WorkerConfig, processes: int, advance: Callable[[int], None]) -> WorkerResult:
    ctx = multiprocessing.get_context("spawn")  # no forked locks, threads or connections
    counter = ctx.Value("q", 0)
    total = WorkerResult()
    with tempfile.TemporaryDirectory(prefix="session-actors-sim-") as tmp:
        workers = []
        for index in range(processes):
            path = str(Path(tmp) / f"worker-{index}.json")
            proc = ctx.Process(
                target=process_main, name=f"sim-process-{index}", args=(replace(base, worker=index), path, counter)
            )
            proc.start()
            workers.append((proc, path))
        seen = 0
        try:
            while any(proc.is_alive() for proc, _ in workers):
                # wake when a worker exits, or at the poll interval to move the bar
                wait_for([proc.sentinel for proc, _ in workers if proc.is_alive()], _PROCESS_POLL_S)
                seen = _advance_to(counter.value, seen, advance)
        except KeyboardInterrupt:  # Ctrl-C: the workers stop too, without a traceback each
            for proc, _ in workers:
                proc.terminate()
            for proc, _ in workers:
                proc.join()
            raise
        _advance_to(counter.value, seen, advance)
        for index, (proc, path) in enumerate(workers):
            proc.join()
            if proc.exitcode != 0 or not os.path.exists(path):
                total.errors["WorkerProcessFailed"] += 1
                total.error_examples.append(f"worker process {index} exited with {proc.exitcode}")
                continue
            total.merge(WorkerResult.from_json(Path(path).read_text(encoding="utf-8")))
    return total


def _advance_to(value: int, seen: int, advance: Callable[[int], None]) -> int:
    if value > seen:
        advance(value - seen)
    return max(value, seen)


def _report(
    config: WorkerConfig, processes: int, result: WorkerResult, integrity: IntegrityReport, elapsed: float
) -> dict[str, Any]:
    violations = integrity.violations() | {"errors": sum(result.errors.values())}
    return {
        "ok": not any(violations.values()),
        "mode": "naive" if config.naive else "actors",
        "unrouted": config.unrouted,
        "run_id": config.prefix.rstrip("-"),
        "seed": config.seed,
        "sessions": config.sessions,
        "turns_per_session": config.turns,
        "threads_per_process": config.threads,
        "processes": processes,
        "elapsed_s": round(elapsed, 3),
        "turns": result.turns,
        "messages_acknowledged": len(result.acks),
        "throughput": {
            "messages_per_s": round(result.appended / elapsed, 1) if elapsed else None,
            "turns_per_s": round(result.turns / elapsed, 1) if elapsed else None,
        },
        "compactions": {
            "committed": integrity.compactions,
            "by_mode": integrity.compactions_by_mode,
            "tail_messages_carried": integrity.tail_messages_carried,
        },
        "manual_outcomes": dict(sorted(result.outcomes.items())),
        "interrupts": {"attempted": result.interrupts, "cancelled": result.interrupts_won},
        "turns_lost": result.turns_lost,
        "violations": violations,
        "examples": integrity.examples + result.error_examples,
        "sessions_checked": integrity.sessions,
        "messages_checked": integrity.messages,
    }


def process_main(config: WorkerConfig, result_path: str, counter: Any) -> None:
    """Entry point of a spawned worker process: own store, own registry, own holder."""
    from ._gateways import open_gateway

    def progress(n: int) -> None:
        with counter.get_lock():
            counter.value += n

    try:
        with open_gateway(config) as gateway:
            result = run_worker(config, gateway, progress)
    except KeyboardInterrupt:  # Ctrl-C reaches the whole process group: the parent reports it
        raise SystemExit(130) from None
    with open(result_path, "w", encoding="utf-8") as fh:
        fh.write(result.to_json())
