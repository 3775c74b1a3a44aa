"""Append throughput of the SQLite store: group commit versus one transaction per append.

64 threads append concurrently to 64 sessions (thread i writes session i) with
``synchronous=FULL``; both modes run in the same invocation on fresh files and
the ratio is printed. Not collected by pytest (the file name does not match).

    python -m tests.benchmarks.bench_append            # default: a few seconds
    python -m tests.benchmarks.bench_append --appends 50 --threads 64 --sessions 64
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
            try:
                start_line.wait()
                for i in range(appends):
                    store.append(sid, Message("user", f"thread {n} message {i} " + "x" * 200))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=64)
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--appends", type=int, default=20, help="appends per thread")
    parser.add_argument("--dir", default=None, help="directory for the database files (local disk)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-append-") as directory:
        common = {"threads": args.threads, "sessions": args.sessions, "appends": args.appends}
        single = run(directory, group_commit=False, **common)
        grouped = run(directory, group_commit=True, **common)
    print(f"{args.threads} threads x {args.sessions} sessions, synchronous=FULL, directory on {directory!r}")
    print(single.line())
    print(grouped.line())
    print(f"group commit speed-up: {grouped.rate / single.rate:.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
