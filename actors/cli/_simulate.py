"""``session-actors simulate``: a gateway-shaped workload, then an integrity report.

Many sessions; user turns (each inside ``turn()``) and assistant replies, some with a
tool call and its result; a background review appending to the same session in the
middle of a turn; "background process finished" events; manual
compresses in both modes; the incident itself (two paths compressing one session at
once); interrupts racing a compression; auto-compaction with a low ``max_tokens``.
All from ``--threads`` threads per process, in ``--processes`` processes (spawned,
each with its own store connection and registry) on one database.

Then every acknowledged message is looked for (see `actors.simulate._check`), along with
forks, orphan writes, seq gaps, lineage cycles, leaked leases, turns split by another
path and tool results separated from their call: all must be 0,
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.text import Text

from persistence.internal import display_url
from protocol import InvalidArgumentError

from ..compressors import LLMCompressor
from ..simulate._chaos import MIN_FAULTS
from ..simulate._config import WorkerConfig
from ..simulate._run import run_simulation
from ._database import ENV_DB, resolve_db
from ._output import Column, Output, flatten
from ._progress import progress

__all__ = ["add_options", "cmd_simulate"]


#: ``--chaos`` faults by default, and at most.
DEFAULT_FAULTS, MAX_FAULTS = 4, 1000


def add_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sessions", type=int, default=48, help="sessions (default 48)")
    parser.add_argument("--turns", type=int, default=100, help="turns per session (default 100)")
    parser.add_argument("--threads", type=int, default=8, help="threads per process (default 8)")
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="worker processes on the same database, each with its own registry (default 1: threads only)",
    )
    parser.add_argument(
        "--unrouted",
        action="store_true",
        help="user turns of each session come from every process (not routed to one), and some appends are "
        "retried with the same key as if their acknowledgement was lost",
    )
    parser.add_argument("--seed", type=int, default=None, help="seed (default: random, printed)")
    parser.add_argument(
        "--naive", action="store_true", help="run the upstream code path (no actors, no leases): expect forks, exit 1"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=700, help="auto-compaction threshold (default 700: compacts often)"
    )
    parser.add_argument(
        "--compress-delay-ms",
        type=float,
        default=20.0,
        help="latency added to the local compressor, like a model call (default 20)",
    )
    parser.add_argument(
        "--chaos",
        action="store_true",
        help="SIGKILL worker processes at random moments (mid-summary and mid-commit "
        "included) and SIGSTOP lease holders past their TTL, restart them, and "
        "check every acknowledgement (needs --processes >= 2)",
    )
    parser.add_argument(
        "--faults",
        type=int,
        default=None,
        help=f"with --chaos: at least this many faults, at least one kill and one freeze (default {DEFAULT_FAULTS})",
    )


#: Upper bounds that catch a typo before it starts thousands of threads or processes.
_LIMITS = {"sessions": 100_000, "turns": 100_000, "threads": 256, "processes": 64, "max_tokens": 10_000_000}


def _check_sizes(args: argparse.Namespace) -> None:
    for name, limit in _LIMITS.items():
        value = getattr(args, name)
        if not 1 <= value <= limit:
            raise InvalidArgumentError(f"--{name.replace('_', '-')} must be between 1 and {limit}, got {value}")
    if not 0 <= args.compress_delay_ms <= 60_000:
        raise InvalidArgumentError("--compress-delay-ms must be between 0 and 60000")
    _check_chaos(args)


def _check_chaos(args: argparse.Namespace) -> None:
    if not args.chaos:
        if args.faults is not None:
            raise InvalidArgumentError("--faults needs --chaos")
        return
    if args.naive:
        raise InvalidArgumentError("--chaos runs the actors: it cannot be combined with --naive")
    if args.processes < 2:
        raise InvalidArgumentError("--chaos needs --processes 2 or more (it kills and restarts workers)")
    faults = DEFAULT_FAULTS if args.faults is None else args.faults
    if not MIN_FAULTS <= faults <= MAX_FAULTS:
        raise InvalidArgumentError(
            f"--faults must be between {MIN_FAULTS} (one kill, one freeze) and {MAX_FAULTS}, got {faults}"
        )
    args.faults = faults


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
    out = Output(args)
    seed = args.seed if args.seed is not None else secrets.randbelow(1_000_000)
    with _database(args) as db:
        base = WorkerConfig(
            db=db,
            prefix=f"sim-{secrets.token_hex(3)}-",
            sessions=args.sessions,
            turns=args.turns,
            threads=args.threads,
            seed=seed,
            workers=args.processes,
            naive=args.naive,
            max_tokens=args.max_tokens,
            target_tokens=max(50, args.max_tokens // 3),
            compress_delay_s=args.compress_delay_ms / 1000,
            compressor=args.compressor,
            llm=_llm_options(args),
            unrouted=args.unrouted,
        )
        shown_db = display_url(db) if not args.naive or getattr(args, "db", None) else "(temporary)"
        # first, and flushed: a run that hangs or is killed still shows how to repeat it
        (out.note if out.structured else out.line)(_header(base, shown_db, args.faults))
        with progress(base.sessions * base.turns, "turns") as advance:
            report = run_simulation(
                base, args.processes, advance=advance, chaos_faults=args.faults if args.chaos else None
            )
    report["database"] = shown_db
    if out.structured:
        out.emit(report, [flatten(report)], list(flatten(report)))
    else:
        _render(out, report)
    return 0 if report["ok"] else 1


def _header(config: WorkerConfig, database: str, faults: int | None) -> str:
    chaos = f", chaos: at least {faults} faults" if faults else ""
    unrouted = ", unrouted (turns from every process, retried appends)" if config.unrouted else ""
    return (
        f"simulate ({'naive' if config.naive else 'actors'}): run {config.prefix.rstrip('-')}, "
        f"seed {config.seed}, {config.sessions} sessions x {config.turns} turns, "
        f"{config.threads} threads x {config.workers} process(es){unrouted}{chaos}, database {database}"
    )


#: What the "errors" count means, printed under the integrity table.
_ERRORS_LEGEND = {
    "actors": "errors: calls of the workload that raised an exception (examples above); "
    "the actor path raises none, so any is a bug",
    "naive": "errors: calls of the workload that raised an exception. The naive path raises "
    "almost none: it does not notice a fork, it writes into the orphan child "
    "silently, which is why forks, orphan writes and lost messages are high while "
    "errors stay low",
}


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _chaos_line(chaos: dict[str, Any]) -> str:
    moments = ", ".join(f"{n} {moment.replace('_', '-')}" for moment, n in chaos["kills_by_moment"].items())
    return (
        f"chaos: {_count(chaos['kills'], 'kill')} ({moments or 'none'}), "
        f"{_count(chaos['freezes'], 'freeze')} past the lease TTL, "
        f"{_count(chaos['restarts'], 'restart')}; expired leases the killed workers left, "
        f"released: {chaos['expired_leases_released']}"
    )


def _render(out: Output, report: dict[str, Any]) -> None:
    tp = report["throughput"]
    out.line(
        f"{report['turns']} turns, {report['messages_acknowledged']} messages acknowledged "
        f"in {report['elapsed_s']:.1f}s: {tp['messages_per_s']} msg/s, {tp['turns_per_s']} turns/s"
    )
    comp = report["compactions"]
    by_mode = ", ".join(f"{mode} {n}" for mode, n in sorted(comp["by_mode"].items()))
    out.line(
        f"compactions committed: {comp['committed']} ({by_mode or 'none'}), "
        f"tail messages carried: {comp['tail_messages_carried']}"
    )
    outcomes = ", ".join(f"{status} {n}" for status, n in report["manual_outcomes"].items())
    out.line(
        f"manual compress outcomes: {outcomes or 'none'}; interrupts that cancelled: "
        f"{report['interrupts']['cancelled']}/{report['interrupts']['attempted']}"
    )
    if "chaos" in report:
        out.line(_chaos_line(report["chaos"]))
    if report.get("turns_lost"):
        out.line(f"turns refused part-way (their worker frozen past its turn lease): {report['turns_lost']}")
    out.table(
        "integrity (all must be 0)",
        ["check", Column("count", "right"), ""],
        [
            (name.replace("_", " "), count, Text("ok", style="green") if count == 0 else Text("FAIL", style="bold red"))
            for name, count in report["violations"].items()
        ],
    )
    for example in report["examples"][:10]:
        out.line(f"  {example}")
    out.line(_ERRORS_LEGEND.get(report["mode"], _ERRORS_LEGEND["actors"]))
    if report["ok"]:
        out.line("OK: no fork, nothing lost", style="bold green")
    else:
        out.line("FAILED: integrity violations found", style="bold red")
