"""Append throughput of the SQLite store: group commit versus one transaction per append.

64 threads append concurrently to 64 sessions (thread i writes session i),
``synchronous=FULL`` in both modes, the same messages (one ~230-byte user
message per append), a fresh database file per run. Each run lasts a fixed
time (``--seconds``): every thread appends until told to stop, and the rate is
the appends that returned divided by the time until the last one returned.
The modes alternate round by round (and which goes first), so load from
elsewhere on the machine hits both alike, and the medians of the rounds are
compared; a short unrecorded warm-up run of each mode comes first. The process
CPU time per append (all threads, user + system) is printed too.

The baseline is ``SqliteStore(path, group_commit=False)``: the store as it
would be without group commit. Each caller runs its own ``BEGIN IMMEDIATE;
UPDATE sessions ... RETURNING; INSERT ...; COMMIT`` in its own thread on the
store's write connection, the callers of this process taking turns through a
mutex, and each append pays its own fsync. It is the plain design, and the
fastest of the plain designs measured on a 2-core VM: handing each append to
a writer thread (batches of one) ran at the same rate, and one connection per
thread meeting at SQLite's lock (its busy handler sleeps and polls) ran ~20%
slower and very unevenly (one thread got 1 append in, another 737).

Not collected by pytest (the file name does not match ``test_*.py``).

    python -m tests.benchmarks.bench_append            # default: about 25 s
    python -m tests.benchmarks.bench_append --seconds 2 --rounds 5 --dir /var/tmp
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from persistence.sqlite import SqliteStore
from tests.benchmarks.timeboxed import Run, time_boxed

MODES = {"one txn per append": False, "group commit": True}


def run(directory: str, mode: str, *, threads: int, sessions: int, seconds: float) -> Run:
    path = os.path.join(directory, f"bench-{MODES[mode]}.db")
    store = SqliteStore(path, synchronous="FULL", group_commit=MODES[mode])
    try:
        ids = [f"bench-{i}" for i in range(sessions)]
        for sid in ids:
            store.create_session(sid)
        before = store.write_stats()
        total, elapsed, cpu = time_boxed(
            [lambda m, sid=ids[n % sessions]: store.append(sid, m) for n in range(threads)], seconds
        )
        after = store.write_stats()
        stored = sum(len(store.transcript(sid)) for sid in ids)
        assert stored == total, f"expected {total} rows, found {stored}"
        return Run(mode, total, elapsed, cpu, after.transactions - before.transactions)
    finally:
        store.close()


def fsync_latency_ms(directory: str, samples: int = 20) -> float:
    """Median time of one small write + fsync here: what a commit costs the disk.
    Group commit saves one of these per append, so the ratio grows with it."""
    path = os.path.join(directory, "fsync-probe")
    times = []
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    try:
        for _ in range(samples):
            os.write(fd, b"x" * 4096)
            began = time.perf_counter()
            os.fsync(fd)
            times.append(time.perf_counter() - began)
    finally:
        os.close(fd)
        os.unlink(path)
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each run")
    parser.add_argument("--rounds", type=int, default=7, help="alternating rounds; medians are compared")
    parser.add_argument("--dir", default=None, help="directory for the database files (local disk)")
    args = parser.parse_args(argv)
    common = {"threads": args.threads, "sessions": args.sessions, "seconds": args.seconds}
    results: dict[str, list[Run]] = {mode: [] for mode in MODES}
    fsync_ms = []
    print(f"{args.threads} threads x {args.sessions} sessions, synchronous=FULL, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-append-") as directory:
        for mode in MODES:  # warm-up, not recorded: first runs in a process are slower
            run(directory, mode, **{**common, "seconds": min(args.seconds, 0.3)})
    for number in range(args.rounds):
        order = list(MODES) if number % 2 == 0 else list(reversed(MODES))  # neither mode always first
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-append-") as directory:
            for mode in order:
                result = run(directory, mode, **common)
                results[mode].append(result)
                print(f"  round {number + 1}: {result.line()}")
            fsync_ms.append(fsync_latency_ms(directory))
    print(f"medians of {args.rounds} rounds (fsync here: {statistics.median(fsync_ms):.2f} ms):")
    rates = {}
    for mode, runs in results.items():
        rates[mode] = statistics.median(r.rate for r in runs)
        cpu = statistics.median(r.cpu_us for r in runs)
        per_txn = statistics.median(r.appends / max(1, r.transactions) for r in runs)
        print(f"  {mode:<20} {rates[mode]:7.0f} appends/s  cpu {cpu:5.0f} us/append  {per_txn:5.1f} appends/txn")
    ratios = [g.rate / s.rate for s, g in zip(results["one txn per append"], results["group commit"])]
    print(
        f"group commit speed-up: {rates['group commit'] / rates['one txn per append']:.1f}x"
        f" (per round: {', '.join(f'{r:.1f}' for r in ratios)})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
