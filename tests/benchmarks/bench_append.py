"""Append throughput of the SQLite store: group commit versus one transaction per append.

64 threads append concurrently to 64 sessions (thread i writes session i) with
``synchronous=FULL``; both modes run in the same invocation on fresh files, in
alternating rounds, and the ratio of the median rates is printed. Not collected
by pytest (the file name does not match ``test_*.py``).

    python -m tests.benchmarks.bench_append            # default: a few seconds
    python -m tests.benchmarks.bench_append --appends 50 --rounds 5 --dir /var/tmp
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from dataclasses import dataclass

from persistence.sqlite import SqliteStore
from protocol import Message


@dataclass(frozen=True)
class Result:
    mode: str
    appends: int
    seconds: float
    transactions: int

    @property
    def rate(self) -> float:
        return self.appends / self.seconds

    def line(self) -> str:
        return (
            f"{self.mode:<22} {self.appends:>6} appends in {self.seconds:6.2f}s = {self.rate:9.0f} appends/s"
            f"  ({self.transactions} transactions, {self.appends / max(1, self.transactions):.1f} appends each)"
        )


def run(directory: str, *, group_commit: bool, threads: int, sessions: int, appends: int) -> Result:
    path = os.path.join(directory, f"bench-{'group' if group_commit else 'single'}.db")
    store = SqliteStore(path, synchronous="FULL", group_commit=group_commit)
    try:
        ids = [f"bench-{i}" for i in range(sessions)]
        for sid in ids:
            store.create_session(sid)
        start_line = threading.Barrier(threads + 1)
        errors: list[BaseException] = []

        def worker(n: int) -> None:
            sid = ids[n % sessions]
            # built before the start line: the timed loop measures appends only
            messages = [Message("user", f"thread {n} message {i} " + "x" * 200) for i in range(appends)]
            try:
                start_line.wait()
                for message in messages:
                    store.append(sid, message)
            except BaseException as exc:  # reported after the run
                errors.append(exc)

        pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
        for t in pool:
            t.start()
        before = store.write_stats()
        start_line.wait()
        began = time.perf_counter()
        for t in pool:
            t.join()
        elapsed = time.perf_counter() - began
        if errors:
            raise errors[0]
        total = threads * appends
        stored = sum(len(store.transcript(sid)) for sid in ids)
        assert stored == total, f"expected {total} rows, found {stored}"
        after = store.write_stats()
        mode = "group commit" if group_commit else "one txn per append"
        return Result(mode, total, elapsed, after.transactions - before.transactions)
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
    return sorted(times)[len(times) // 2] * 1000


def _median(results: list[Result]) -> Result:
    return sorted(results, key=lambda r: r.rate)[len(results) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--appends", type=int, default=20, help="appends per thread per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument("--dir", default=None, help="directory for the database files (local disk)")
    args = parser.parse_args(argv)
    common = {"threads": args.threads, "sessions": args.sessions, "appends": args.appends}
    singles, groups = [], []
    for _ in range(args.rounds):  # alternate, so load from elsewhere hits both modes alike
        with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-append-") as directory:
            singles.append(run(directory, group_commit=False, **common))
            groups.append(run(directory, group_commit=True, **common))
            fsync_ms = fsync_latency_ms(directory)
    print(
        f"{args.threads} threads x {args.sessions} sessions, synchronous=FULL, median of {args.rounds} rounds;"
        f" fsync here takes {fsync_ms:.2f} ms, {os.cpu_count()} CPUs"
    )
    single, grouped = _median(singles), _median(groups)
    print(single.line())
    print(grouped.line())
    print(f"group commit speed-up: {grouped.rate / single.rate:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
