"""``session-actors simulate``: a gateway-shaped workload, then an integrity report.

Many sessions; user turns and assistant replies; a background review appending to
the same session at the same time; "background process finished" events; manual
compresses in both modes; the incident itself (two paths compressing one session at
once); interrupts racing a compression; auto-compaction with a low ``max_tokens``.
All from ``--threads`` threads per process, in ``--processes`` processes (spawned,
each with its own store connection and registry) on one database.

Then every acknowledged message is looked for (see `actors.simulate.check`), along with
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
import os
import secrets
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from persistence.urls import display_url
from protocol import InvalidArgumentError

from ..compressors import LLMCompressor
from ..simulate.config import WorkerConfig
from ..simulate.run import run_simulation
from .database import ENV_DB, resolve_db
from .output import console, emit_json

__all__ = ["add_options", "cmd_simulate"]


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
        with _progress(base.sessions * base.turns, not getattr(args, "json", False)) as advance:
            report = run_simulation(base, args.processes, advance=advance)
    report["database"] = display_url(db) if not args.naive or getattr(args, "db", None) else "(temporary)"
    if getattr(args, "json", False):
        emit_json(report)
    else:
        _render(report)
    return 0 if report["ok"] else 1


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
