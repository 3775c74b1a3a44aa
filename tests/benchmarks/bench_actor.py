"""Actor-layer benchmark (prints figures; not collected by pytest).

    python tests/benchmarks/bench_actor.py [--db-dir DIR] [--appends N]

(a) append latency through a handle vs a direct ``store.append`` on the same DB;
(b) append latency while a gated 2-second compaction is in flight vs idle;
(c) durable appends/s, 64 sessions through the registry (group commit) vs
    one transaction per append (``open_store(path, group_commit=False)``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from actors import CompactionPolicy, SessionRegistry  # noqa: E402
from actors.testing import GatedCompressor  # noqa: E402
from persistence import open_store  # noqa: E402
from protocol import Message  # noqa: E402

SESSIONS = 64


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50 * 1000, p99 * 1000


def timed(n: int, call: Callable[[int], object]) -> list[float]:
    samples = []
    for i in range(n):
        started = time.perf_counter()
        call(i)
        samples.append(time.perf_counter() - started)
    return samples


def bench_latency(path: str, n: int) -> None:
    store = open_store(path)
    try:
        store.create_session("direct")
        direct = timed(n, lambda i: store.append("direct", Message("user", f"d{i}")))
        with SessionRegistry(store) as registry:
            handle = registry.session("via-handle")
            handle.append("user", "warm-up")
            via = timed(n, lambda i: handle.append("user", f"h{i}"))
    finally:
        store.close()
    d50, d99 = percentiles(direct)
    h50, h99 = percentiles(via)
    print(f"(a) append latency  direct store: p50 {d50:.2f} ms  p99 {d99:.2f} ms")
    print(f"    append latency  via handle:   p50 {h50:.2f} ms  p99 {h99:.2f} ms"
          f"   ratio p50 {h50 / d50:.2f}x (target <= 2x)")


def bench_during_compaction(path: str, n: int) -> None:
    store = open_store(path)
    gated = GatedCompressor()
    try:
        with SessionRegistry(store, compressor=gated) as registry:
            handle = registry.session("busy")
            handle.append([Message("user" if i % 2 == 0 else "assistant", f"seed {i}")
                           for i in range(20)])
            idle = timed(n, lambda i: handle.append("user", f"idle {i}"))
            box: dict = {}
            compressing = threading.Thread(target=lambda: box.setdefault("o", handle.compress()))
            compressing.start()
            gated.wait_started(10)
            window_end = time.monotonic() + 2.0
            during: list[float] = []
            while time.monotonic() < window_end:
                during += timed(1, lambda i: handle.append("user", "during"))
            gated.release()
            compressing.join(30)
    finally:
        store.close()
    i50, i99 = percentiles(idle)
    c50, c99 = percentiles(during)
    print(f"(b) append latency  idle:                 p50 {i50:.2f} ms  p99 {i99:.2f} ms")
    print(f"    append latency  during 2 s compaction: p50 {c50:.2f} ms  p99 {c99:.2f} ms"
          f"  ({len(during)} appends, outcome {box['o'].status.name}; target p99 <= 50 ms)")


def run_clients(count: int, per_client: int, append: Callable[[int, int], object]) -> float:
    barrier = threading.Barrier(count + 1)

    def client(k: int) -> None:
        barrier.wait()
        for i in range(per_client):
            append(k, i)

    threads = [threading.Thread(target=client, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    return count * per_client / (time.perf_counter() - started)


def bench_throughput(tmp: str, per_client: int) -> None:
    direct_store = open_store(os.path.join(tmp, "direct.db"), group_commit=False)
    try:
        for k in range(SESSIONS):
            direct_store.create_session(f"d{k}")
        direct = run_clients(SESSIONS, per_client,
                             lambda k, i: direct_store.append(f"d{k}", Message("user", f"{i}")))
    finally:
        direct_store.close()
    grouped_store = open_store(os.path.join(tmp, "grouped.db"))
    try:
        for k in range(SESSIONS):
            grouped_store.create_session(f"g{k}")
        grouped = run_clients(SESSIONS, per_client,
                              lambda k, i: grouped_store.append(f"g{k}", Message("user", f"{i}")))
    finally:
        grouped_store.close()
    store = open_store(os.path.join(tmp, "registry.db"))
    try:
        policy = CompactionPolicy(max_resident=SESSIONS * 2)
        with SessionRegistry(store, policy=policy) as registry:
            handles = [registry.session(f"r{k}") for k in range(SESSIONS)]
            via = run_clients(SESSIONS, per_client,
                              lambda k, i: handles[k].append("user", f"{i}"))
    finally:
        store.close()
    print(f"(c) durable appends/s, {SESSIONS} sessions: registry {via:,.0f}/s  "
          f"direct one-txn-per-append {direct:,.0f}/s  ratio {via / direct:.1f}x (target >= 5x)")
    print(f"    for scale: the store's own group commit without actors {grouped:,.0f}/s "
          f"({grouped / direct:.1f}x the one-txn path on this disk)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-dir", help="directory for the database files (default: a temp dir)")
    parser.add_argument("--appends", type=int, default=500, help="appends per latency series")
    parser.add_argument("--per-client", type=int, default=40, help="appends per session in (c)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.db_dir) as tmp:
        bench_latency(os.path.join(tmp, "a.db"), args.appends)
        bench_during_compaction(os.path.join(tmp, "b.db"), args.appends)
        bench_throughput(tmp, args.per_client)


if __name__ == "__main__":
    main()
