"""The peers' workload: session-actors and other frameworks' session stores side by side.

    python -m tests.benchmarks peers [--rounds 3] [--workers 4] [--sessions 32] [--asks 120]
                                     [--peers session-actors,agents-sdk,hermes] [--kill | --compaction]

Several worker processes share sessions; each runs its share of a seeded plan of user asks
(about 10% delivered twice, the second time usually to another worker), a turn of four
durable writes per ask (user ask, tool call, tool result, answer) and a background review
note per turn, on SQLite with ``synchronous=FULL`` for every system. A checker then reads
every session through the system's own API and counts, against the workers' ledgers of
acknowledged writes: lost, duplicated asks, split turns, forks, errors raised, failed turns;
and appends/s (acknowledged writes over the workers' wall time, all starting together).
Rounds alternate the systems' order; the table gives the counts summed over rounds and the
median appends/s with its ratio to session-actors (turns on) measured in the same run.

``--profile DIR``: a cProfile of every worker (all its threads) into DIR.

``--compaction``: the same workload while every system that has compaction compacts (the
rules, the stub compressors and what "lost" and "erased" mean: `tests.benchmarks.peers.compaction`);
the table counts lost, erased, compactions, errors and failed turns; a row without compaction
is "n/a", with the reason.

``--kill``: instead, a worker is killed (SIGKILL) after the first write of a turn, default
settings everywhere; the figure is how long another process's turn on that session waits
until its first write is acknowledged.

The systems are the rows of `tests.benchmarks.peers.systems.SYSTEMS`. Each peer is installed
on demand into a virtual environment of its own under ``~/.cache/session-actors/peers/<name>``
(never by CI); a peer that cannot be installed is reported as skipped, with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from tests.benchmarks.peers import compaction
from tests.benchmarks.peers.systems import SYSTEMS
from tests.benchmarks.peers.workload import COMPACTION, make_plan

HERE = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "session-actors" / "peers"
WORKLOAD = "tests.benchmarks.peers.workload"
COUNTS = ("lost", "duplicated", "split", "forks", "errors", "failed")
COMPACTION_COUNTS = ("lost", "erased", "compactions", "errors", "failed")
BASE = "session-actors"


@dataclass
class Runner:
    """How to run one system's roles: its interpreter and environment."""

    name: str
    python: str
    env: dict[str, str]
    versions: dict[str, str] = field(default_factory=dict)

    def popen(self, *args: str, stderr: object = subprocess.DEVNULL) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [self.python, "-m", WORKLOAD, *args],
            cwd=HERE,
            env=self.env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,  # type: ignore[arg-type]
            text=True,
        )

    def run(self, *args: str, timeout: float = 600) -> dict[str, object]:
        out = subprocess.run(
            [self.python, "-m", WORKLOAD, *args],
            cwd=HERE,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if out.returncode != 0:
            raise RuntimeError(f"{self.name} {args[0]} failed: {out.stderr.strip()[-2000:]}")
        return json.loads(out.stdout.strip().splitlines()[-1])


def runner(name: str) -> Runner | str:
    """The system's `Runner`, installing a peer on demand; a string says why it is skipped.

    A row of this tree without requirements runs in this interpreter; one with requirements
    (a framework's path through session-actors) in a virtual environment holding them and
    session-actors' own dependencies, this tree on PYTHONPATH; a peer in its own."""
    system = SYSTEMS[name]
    python = sys.executable
    if system.requirements:
        python = install(name, system.requirements + (_tree_dependencies() if system.uses_tree else ()))
        if not python.startswith("/"):
            return python
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if system.uses_tree:
        env["PYTHONPATH"] = str(HERE)
    found = Runner(name, python, env)
    try:
        found.versions = {k: str(v) for k, v in found.run("versions", name, timeout=120).items()}
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        return f"not importable: {str(exc).splitlines()[-1][:200]}"
    return found


def _tree_dependencies() -> tuple[str, ...]:
    with open(HERE / "pyproject.toml", "rb") as f:
        return tuple(tomllib.load(f)["project"]["dependencies"])


def install(name: str, requirements: tuple[str, ...]) -> str:
    """The interpreter of the peer's own virtual environment (created and filled once per set
    of requirements); else why it could not be installed."""
    venv, wanted = CACHE / name, " ".join(requirements)
    marker, python = venv / ".installed", venv / "bin" / "python"
    if marker.exists() and marker.read_text().strip() == wanted and python.exists():
        return str(python)
    print(f"installing {wanted} into {venv} ...", flush=True)
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [str(python), "-m", "pip", "install", "-q", *requirements],
    ]
    for step in steps:
        try:
            done = subprocess.run(step, capture_output=True, text=True, timeout=1200)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"install failed: {exc}"
        if done.returncode != 0:
            return f"install failed: {(done.stderr.strip().splitlines() or ['?'])[-1][:200]}"
    marker.write_text(wanted + "\n")
    return str(python)


def one_round(run: Runner, tmp: Path, plan: Path, workers: int, sessions: int) -> dict[str, float]:
    """One fresh store: setup, the workers started together, then the checker."""
    work = Path(tempfile.mkdtemp(prefix=f"{run.name}-", dir=tmp))
    db, ledgers = str(work / "store.db"), [str(work / f"ledger-{w}.txt") for w in range(workers)]
    run.run("setup", run.name, db, str(sessions))
    with open(work / "stderr.txt", "w") as err:
        procs = [run.popen("work", run.name, db, str(plan), str(w), ledgers[w], stderr=err) for w in range(workers)]
        try:
            results = _started_together(run.name, procs, work)
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    wall = max(r["end"] for r in results) - min(r["start"] for r in results)
    figures: dict[str, float] = dict(run.run("check", run.name, db, str(plan), *ledgers))  # type: ignore[arg-type]
    figures["errors"] = sum(r["errors"] for r in results)
    figures["failed"] = sum(r["failed"] for r in results)
    figures["compactions"] = sum(r.get("compactions", 0) for r in results)
    figures["rate"] = sum(r["acked"] for r in results) / wall
    return figures


def _started_together(name: str, procs: list[subprocess.Popen[str]], work: Path) -> list[dict[str, float]]:
    for proc in procs:
        if proc.stdout is None or proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{name}: a worker did not start (see {work / 'stderr.txt'})")
    for proc in procs:  # all start together
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
    return [json.loads(proc.communicate(timeout=1800)[0].strip().splitlines()[-1]) for proc in procs]


def kill_round(run: Runner, tmp: Path) -> float:
    """Seconds another process's turn waits after the holder of a turn was killed mid-turn."""
    work = Path(tempfile.mkdtemp(prefix=f"{run.name}-kill-", dir=tmp))
    db = str(work / "store.db")
    run.run("setup", run.name, db, "1")
    holder = run.popen("hold", run.name, db, "s00")
    waiter = None
    try:
        assert holder.stdout is not None
        if holder.stdout.readline().strip() != "holding":
            raise RuntimeError(f"{run.name}: the holder never opened its turn")
        waiter = run.popen("wait", run.name, db, "s00")
        assert waiter.stdout is not None and waiter.stdin is not None
        if waiter.stdout.readline().strip() != "ready":
            raise RuntimeError(f"{run.name}: the waiter did not start")
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        waiter.stdin.write("go\n")
        waiter.stdin.flush()
        return float(json.loads(waiter.communicate(timeout=300)[0].strip().splitlines()[-1])["stall"])
    finally:
        for proc in (holder, waiter):
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()


def table(
    rows: dict[str, list[dict[str, float]]],
    rounds: int,
    columns: tuple[str, ...] = COUNTS,
    labels: dict[str, str] | None = None,
) -> list[str]:
    """Counts summed over rounds; the median rate, its ratio to session-actors' median, and the
    range of the ratios round by round (each round's systems ran minutes apart at most)."""
    base = [r["rate"] for r in rows.get(BASE, [])]
    lines = [
        f"| system (summed over {rounds} rounds) | "
        + " | ".join(columns)
        + " | appends/s (median) | range | vs session-actors | per round |",
        "|---|" + "---:|" * (len(columns) + 4),
    ]
    for name, figures in rows.items():
        rates = [f["rate"] for f in figures]
        median = statistics.median(rates)
        counts = " | ".join(f"{int(sum(f[c] for f in figures)):,}" for c in columns)
        ratio, per_round = "-", "-"
        if base:
            paired = [rate / b for rate, b in zip(rates, base, strict=False)]
            ratio = f"{median / statistics.median(base):.2f}x"
            per_round = f"{min(paired):.2f}-{max(paired):.2f}x"
        label = (labels or {}).get(name, SYSTEMS[name].label)
        lines.append(
            f"| {label} | {counts} | {median:,.0f} | {min(rates):,.0f}-{max(rates):,.0f} | {ratio} | {per_round} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--asks", type=int, default=120, help="user asks per worker")
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--peers", default=",".join(SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--kill", action="store_true", help="the dead-holder figure instead of the workload")
    mode.add_argument("--compaction", action="store_true", help="every system that can compacts while it runs")
    parser.add_argument("--profile", metavar="DIR", help="write a cProfile of each worker (all its threads) into DIR")
    args = parser.parse_args()
    names = [n.strip() for n in args.peers.split(",") if n.strip()]
    if args.compaction:  # the workers and the checker read it; rows without compaction are "n/a"
        os.environ[COMPACTION] = "1"
        names, args.without = [n for n in names if n in compaction.ROWS], [n for n in names if n not in compaction.ROWS]
    if args.profile:  # the workers read it (a profile slows them: its figures are not comparable)
        os.makedirs(args.profile, exist_ok=True)
        os.environ["SESSION_ACTORS_PEERS_PROFILE"] = os.path.abspath(args.profile)
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        parser.error(f"unknown system(s) {', '.join(unknown)}; known: {', '.join(SYSTEMS)}")
    runners: dict[str, Runner] = {}
    for name in names:
        found = runner(name)
        if isinstance(found, str):
            print(f"skipped {SYSTEMS[name].label}: {found}", flush=True)
        else:
            runners[name] = found
            print(f"{SYSTEMS[name].label}: {found.versions or 'this tree'}", flush=True)
    with tempfile.TemporaryDirectory(prefix="bench-peers-") as tmp_dir:
        if args.kill:
            kill_table(runners, Path(tmp_dir), args.rounds)
        else:
            workload_table(runners, Path(tmp_dir), args)


def workload_table(runners: dict[str, Runner], tmp: Path, args: argparse.Namespace) -> None:
    plan = tmp / "plan.json"
    plan.write_text(json.dumps(make_plan(args.workers, args.sessions, args.asks, args.seed)))
    print(
        f"{args.workers} workers, {args.sessions} sessions, {args.asks} asks per worker, "
        f"{args.rounds} rounds, SQLite synchronous=FULL",
        flush=True,
    )
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in runners}
    for round_no in range(args.rounds):
        order = list(runners.values()) if round_no % 2 == 0 else list(runners.values())[::-1]
        for run in order:
            began = time.perf_counter()
            figures = one_round(run, tmp, plan, args.workers, args.sessions)
            rows[run.name].append(figures)
            shown = " ".join(f"{c}={int(figures[c])}" for c in (COMPACTION_COUNTS if args.compaction else COUNTS))
            print(
                f"round {round_no + 1} {run.name}: {figures['rate']:,.0f} appends/s {shown} "
                f"({time.perf_counter() - began:.0f} s)",
                flush=True,
            )
    if args.compaction:
        print("\n".join(compaction_table(rows, args.rounds, args.without)))
    else:
        print("\n".join(table(rows, args.rounds)))


def compaction_table(rows: dict[str, list[dict[str, float]]], rounds: int, without: list[str]) -> list[str]:
    """The compacting systems' rows, then an "n/a" row for each system without compaction,
    then why it has none."""
    labels = {name: compaction.ROWS[name].label for name in rows}
    lines = [f"compaction past {compaction.TRIGGER} live messages, a tail of at least {compaction.KEEP}"]
    lines += table(rows, rounds, COMPACTION_COUNTS, labels)
    lines += [f"| {SYSTEMS[n].label} | " + " | ".join(["n/a"] * (len(COMPACTION_COUNTS) + 4)) + " |" for n in without]
    return lines + [f"n/a: {SYSTEMS[n].label}: {compaction.WITHOUT[n]}" for n in without]


def kill_table(runners: dict[str, Runner], tmp: Path, rounds: int) -> None:
    print(f"kill -9 of a worker mid-turn, default settings, {rounds} rounds", flush=True)
    print("| system | stall, median (s) | max (s) |\n|---|---:|---:|")
    for run in runners.values():
        stalls = [kill_round(run, tmp) for _ in range(rounds)]
        print(f"| {SYSTEMS[run.name].label} | {statistics.median(stalls):.2f} | {max(stalls):.2f} |", flush=True)


if __name__ == "__main__":
    main()
