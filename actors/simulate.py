"""``session-actors simulate``: a gateway-shaped workload, then an integrity report.

Many sessions; user turns and assistant replies; a background review appending to
the same session at the same time; "background process finished" events; manual
compresses in both modes; the incident itself (two paths compressing one session at
once); interrupts racing a compression; auto-compaction with a low ``max_tokens``.
All from ``--threads`` threads per process, in ``--processes`` processes (spawned,
each with its own store connection and registry) on one database.

Then every acknowledged message is looked for (see `simulate_check`), along with
forks, orphan writes, seq gaps, lineage cycles and leaked leases: all must be 0,
else exit status 1. ``--naive`` runs the same workload on the upstream code path
(no actors, no leases) to show the forks it makes.

Database: ``--db`` / ``$SESSION_ACTORS_DB`` / ``./state.db``, created if missing, so the
other commands can inspect the run afterwards; each run's ids start with
``sim-<run id>-`` and only they are checked. ``--naive`` uses a throwaway temporary
database unless ``--db`` is given, so its forks don't pollute your store.
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
from multiprocessing.connection import wait as wait_for
import os
import secrets
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from persistence import open_store
from persistence.urls import display_url
from protocol import InvalidArgumentError, Message

from .cli_db import ENV_DB, resolve_db
from .cli_output import console, emit_json
from .simulate_check import Ack, IntegrityReport, check_run
from .simulate_workload import WorkerConfig, WorkerResult, run_worker, session_ids

__all__ = ["add_options", "cmd_simulate", "run_simulation"]

log = logging.getLogger("session_actors.simulate")

#: How often the parent refreshes the progress bar while worker processes run.
_PROCESS_POLL_S = 0.1


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=48, help="sessions (default 48)")
    parser.add_argument("--turns", type=int, default=100, help="turns per session (default 100)")
    parser.add_argument("--threads", type=int, default=8, help="threads per process (default 8)")
    parser.add_argument("--processes", type=int, default=1,
                        help="worker processes on the same database, each with its own registry "
                             "(default 1: threads only)")
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument("--naive", action="store_true",
                        help="run the upstream code path (no actors, no leases): expect forks, exit 1")
    parser.add_argument("--max-tokens", type=int, default=700,
                        help="auto-compaction threshold (default 700: compacts often)")
    parser.add_argument("--compress-delay-ms", type=float, default=20.0,
                        help="latency added to the local compressor, like a model call (default 20)")


#: Upper bounds that catch a typo before it starts thousands of threads or processes.
_LIMITS = {"sessions": 100_000, "turns": 100_000, "threads": 256, "processes": 64,
           "max_tokens": 10_000_000}


def _check_sizes(args: argparse.Namespace) -> None:
    for name, limit in _LIMITS.items():
        value = getattr(args, name)
        if not 1 <= value <= limit:
            raise InvalidArgumentError(
                f"--{name.replace('_', '-')} must be between 1 and {limit}, got {value}")
    if not 0 <= args.compress_delay_ms <= 60_000:
        raise InvalidArgumentError("--compress-delay-ms must be between 0 and 60000")


def _llm_options(args: argparse.Namespace) -> dict[str, Any]:
    if args.compressor != "llm":
        return {}
    from .llm import LLMCompressor

    options = {"base_url": args.llm_base_url, "model": args.llm_model, "timeout_s": args.llm_timeout}
    probe = LLMCompressor(**options)  # ConfigurationError now, not in every worker
    return {"base_url": probe.base_url, "model": probe.model, "timeout_s": probe.timeout_s}


@contextmanager
def _database(args: argparse.Namespace) -> Iterator[str]:
    explicit = getattr(args, "db", None) or os.environ.get(ENV_DB)
    if explicit or not args.naive:
        yield resolve_db(args)
        return
    with tempfile.TemporaryDirectory(prefix="session-actors-naive-") as tmp:
        yield str(Path(tmp) / "naive.db")


def cmd_simulate(args: argparse.Namespace) -> int:
    _check_sizes(args)
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    with _database(args) as db:
        base = WorkerConfig(
            db=db, prefix=f"sim-{secrets.token_hex(3)}-", sessions=args.sessions,
            turns=args.turns, threads=args.threads, seed=seed, workers=args.processes,
            naive=args.naive, max_tokens=args.max_tokens, target_tokens=max(50, args.max_tokens // 3),
            compress_delay_s=args.compress_delay_ms / 1000, compressor=args.compressor,
            llm=_llm_options(args),
        )
        report = run_simulation(base, args.processes, show_progress=not getattr(args, "json", False))
    report["database"] = display_url(db) if not args.naive or getattr(args, "db", None) else "(temporary)"
    if getattr(args, "json", False):
        emit_json(report)
    else:
        _render(report)
    return 0 if report["ok"] else 1


def run_simulation(base: WorkerConfig, processes: int, *, show_progress: bool = True) -> dict[str, Any]:
    """Prepare the sessions, run the workers, check the store; the report as a dict."""
    roots = session_ids(base.prefix, base.sessions)
    prepared = _prepare(base.db, roots)
    started = time.monotonic()
    with _progress(base.sessions * base.turns, show_progress) as advance:
        if processes == 1:
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
    return _report(base, processes, result, integrity, elapsed)


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


@contextmanager
def _progress(total: int, enabled: bool) -> Iterator[Callable[[int], None]]:
    out = Console(stderr=True)
    with Progress(
        TextColumn("simulating"), BarColumn(), MofNCompleteColumn(), TextColumn("turns"),
        TimeElapsedColumn(), console=out, disable=not (enabled and out.is_terminal),
        transient=False,
    ) as progress:
        task = progress.add_task("turns", total=total)
        yield lambda n: progress.advance(task, n)


def _run_in_process(config: WorkerConfig, advance: Callable[[int], None]) -> WorkerResult:
    from .simulate_gateways import open_gateway  # pykka and the registry, only when running

    with open_gateway(config) as gateway:
        return run_worker(config, gateway, advance)


def _run_processes(base: WorkerConfig, processes: int, advance: Callable[[int], None]) -> WorkerResult:
    from .simulate_workload import process_main

    ctx = multiprocessing.get_context("spawn")  # no forked locks, threads or connections
    counter = ctx.Value("q", 0)
    total = WorkerResult()
    with tempfile.TemporaryDirectory(prefix="session-actors-sim-") as tmp:
        workers = []
        for index in range(processes):
            path = str(Path(tmp) / f"worker-{index}.json")
            proc = ctx.Process(target=process_main, name=f"sim-process-{index}",
                               args=(replace(base, worker=index), path, counter))
            proc.start()
            workers.append((proc, path))
        seen = 0
        while any(proc.is_alive() for proc, _ in workers):
            # wake when a worker exits, or at the poll interval to move the bar
            wait_for([proc.sentinel for proc, _ in workers if proc.is_alive()], _PROCESS_POLL_S)
            seen = _advance_to(counter.value, seen, advance)
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


def _report(config: WorkerConfig, processes: int, result: WorkerResult,
            integrity: IntegrityReport, elapsed: float) -> dict[str, Any]:
    violations = integrity.violations() | {"errors": sum(result.errors.values())}
    return {
        "ok": not any(violations.values()),
        "mode": "naive" if config.naive else "actors",
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
        "violations": violations,
        "examples": integrity.examples + result.error_examples,
        "sessions_checked": integrity.sessions,
        "messages_checked": integrity.messages,
    }


def _render(report: dict[str, Any]) -> None:
    out = console()
    out.print(f"simulate ({report['mode']}): run {report['run_id']}, seed {report['seed']}, "
              f"{report['sessions']} sessions x {report['turns_per_session']} turns, "
              f"{report['threads_per_process']} threads x {report['processes']} process(es), "
              f"database {report['database']}")
    tp = report["throughput"]
    out.print(f"{report['turns']} turns, {report['messages_acknowledged']} messages acknowledged "
              f"in {report['elapsed_s']:.1f}s: {tp['messages_per_s']} msg/s, {tp['turns_per_s']} turns/s")
    comp = report["compactions"]
    by_mode = ", ".join(f"{mode} {n}" for mode, n in sorted(comp["by_mode"].items()))
    out.print(f"compactions committed: {comp['committed']} ({by_mode or 'none'}), "
              f"tail messages carried: {comp['tail_messages_carried']}")
    outcomes = ", ".join(f"{status} {n}" for status, n in report["manual_outcomes"].items())
    out.print(f"manual compress outcomes: {outcomes or 'none'}; interrupts that cancelled: "
              f"{report['interrupts']['cancelled']}/{report['interrupts']['attempted']}")
    table = Table(title="integrity (all must be 0)")
    table.add_column("check")
    table.add_column("count", justify="right")
    table.add_column("")
    for name, count in report["violations"].items():
        verdict = Text("ok", style="green") if count == 0 else Text("FAIL", style="bold red")
        table.add_row(name.replace("_", " "), str(count), verdict)
    out.print(table)
    for example in report["examples"][:10]:
        out.print(f"  {example}")
    out.print("OK: no fork, nothing lost" if report["ok"] else "FAILED: integrity violations found")
