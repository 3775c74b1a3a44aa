"""Throughput of the PostgreSQL store on the local server (an isolated schema).

Appends from T threads to T sessions (no contention) and to one shared session
(every append serialized on its row lock), then compaction commits of a
transcript while writers keep appending. Not collected by pytest.

    python -m tests.benchmarks.bench_postgres
    python -m tests.benchmarks.bench_postgres --threads 16 --appends 100 --commits 20
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time

from persistence.postgres import PostgresStore
from protocol import Message
from tests.pg import isolated_postgres_url


def appends(store: PostgresStore, sessions: list[str], threads: int, count: int) -> float:
    """Appends/s with ``threads`` threads; thread i writes ``sessions[i % len]``."""
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        sid = sessions[n % len(sessions)]
        try:
            barrier.wait()
            for i in range(count):
                store.append(sid, Message("user", f"thread {n} message {i} " + "x" * 200))
        except BaseException as exc:  # reported after the run
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(n,)) for n in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in pool:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise errors[0]
    return threads * count / elapsed


def commit_latencies(store: PostgresStore, commits: int) -> list[float]:
    """Seconds per in-place commit of a ~50-message transcript with a live writer."""
    store.create_session("compact-me")
    stop = threading.Event()

    def writer() -> None:
        while not stop.is_set():
            store.append("compact-me", Message("assistant", "y" * 200))

    store.append("compact-me", [Message("user", f"m{i}") for i in range(50)])
    thread = threading.Thread(target=writer)
    thread.start()
    out = []
    try:
        for n in range(commits):
            lease = store.acquire_lease("compact-me", "bench", 30)
            snapshot = store.transcript("compact-me")
            started = time.perf_counter()
            store.commit_compaction(lease, watermark=snapshot[-1].seq,
                                    compacted=[Message("user", f"[CONTEXT COMPACTION] {n}")],
                                    mode="in_place")
            out.append(time.perf_counter() - started)
            store.release_lease(lease)
            store.append("compact-me", [Message("user", f"r{n}-{i}") for i in range(50)])
    finally:
        stop.set()
        thread.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--appends", type=int, default=100, help="per thread")
    parser.add_argument("--commits", type=int, default=20)
    args = parser.parse_args()
    with isolated_postgres_url() as url:
        store = PostgresStore(url, max_size=args.threads + 2)
        try:
            ids = [f"bench-{i}" for i in range(args.threads)]
            for sid in ids:
                store.create_session(sid)
            total = args.threads * args.appends
            print(f"{total} appends, {args.threads} threads, {args.threads} sessions: "
                  f"{appends(store, ids, args.threads, args.appends):8.0f} appends/s")
            print(f"{total} appends, {args.threads} threads, 1 shared session: "
                  f"{appends(store, ids[:1], args.threads, args.appends):8.0f} appends/s")
            lat = commit_latencies(store, args.commits)
            print(f"{len(lat)} in-place commits with a live writer: median {statistics.median(lat) * 1000:.1f} ms,"
                  f" max {max(lat) * 1000:.1f} ms")
        finally:
            store.close()


if __name__ == "__main__":
    main()
