"""Actor-layer benchmark (prints figures; not collected by pytest).

    python tests/benchmarks/bench_actor.py [--db-dir DIR] [--appends N]
                                           [--seconds 1.5] [--rounds 5] [--only-c]

(a) append latency through a handle vs a direct ``store.append`` on the same DB;
(b) append latency while a gated 2-second compaction is in flight vs idle;
(c) durable appends/s, 64 client threads on 64 sessions (client k appends to
    session k), in three modes: through `SessionRegistry` handles (group commit),
    direct one transaction per append (``open_store(path, group_commit=False)``),
    and, for scale, direct ``store.append`` with the store's group commit.
    Every mode appends the same prebuilt ~230-byte messages from the same number of
    threads. Each run is time-boxed (``--seconds``) on a fresh database: clients
    append until told to stop, and the rate is the acknowledged appends divided by
    the time until the last one returned. An unrecorded warm-up run of each mode
    comes first; then ``--rounds`` rounds rotate which mode goes first, and the
    medians are compared (per-round ratios printed too). After each run the store
    is closed and a fresh connection counts the rows: it must equal the number of
    acknowledged appends. Default run: about 35 s.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from actors import CompactionPolicy, SessionRegistry
from actors.testing import GatedCompressor
from persistence import open_store
from protocol import Message
from tests.benchmarks.timeboxed import Run, time_boxed

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
    print(
        f"    append latency  via handle:   p50 {h50:.2f} ms  p99 {h99:.2f} ms"
        f"   ratio p50 {h50 / d50:.2f}x (target <= 2x)"
    )


def bench_during_compaction(path: str, n: int) -> None:
    store = open_store(path)
    gated = GatedCompressor()
    try:
        with SessionRegistry(store, compressor=gated) as registry:
            handle = registry.session("busy")
            handle.append([Message("user" if i % 2 == 0 else "assistant", f"seed {i}") for i in range(20)])
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
    print(
        f"    append latency  during 2 s compaction: p50 {c50:.2f} ms  p99 {c99:.2f} ms"
        f"  ({len(during)} appends, outcome {box['o'].status.name}; target p99 <= 50 ms)"
    )


THROUGHPUT_MODES = ("registry", "direct one-txn", "store group commit")


def rows_on_disk(path: str) -> int:
    """Message rows in the file, read by a fresh connection after the store closed."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
    finally:
        conn.close()


def throughput_run(directory: str, mode: str, seconds: float) -> Run:
    """A fresh database, SESSIONS client threads (client k appends to session k)."""
    path = os.path.join(directory, f"c-{mode.replace(' ', '-')}.db")
    store = open_store(path, group_commit=(mode != "direct one-txn"))
    try:
        ids = [f"s{k}" for k in range(SESSIONS)]
        if mode == "registry":
            with SessionRegistry(store, policy=CompactionPolicy(max_resident=SESSIONS * 2)) as registry:
                handles = [registry.session(sid) for sid in ids]  # actors started before the clock
                before = store.write_stats().transactions
                acked, elapsed, cpu = time_boxed([h.append for h in handles], seconds)
                transactions = store.write_stats().transactions - before
        else:
            for sid in ids:
                store.create_session(sid)
            before = store.write_stats().transactions
            acked, elapsed, cpu = time_boxed([lambda m, sid=sid: store.append(sid, m) for sid in ids], seconds)
            transactions = store.write_stats().transactions - before
    finally:
        store.close()
    stored = rows_on_disk(path)
    assert stored == acked, f"{mode}: {acked} appends acknowledged, {stored} rows on disk"
    return Run(mode, acked, elapsed, cpu, transactions)


def bench_throughput(seconds: float, rounds: int, db_dir: str | None) -> None:
    runs: dict[str, list[Run]] = {mode: [] for mode in THROUGHPUT_MODES}
    with tempfile.TemporaryDirectory(dir=db_dir, prefix="bench-actor-warm-") as directory:
        for mode in THROUGHPUT_MODES:  # warm-up, not recorded
            throughput_run(directory, mode, min(seconds, 0.3))
    print(
        f"(c) durable appends/s, {SESSIONS} client threads x {SESSIONS} sessions, "
        f"{seconds:g} s per run, {rounds} rounds, order rotating:"
    )
    for number in range(rounds):
        shift = number % len(THROUGHPUT_MODES)  # each mode takes its turn at going first
        order = THROUGHPUT_MODES[shift:] + THROUGHPUT_MODES[:shift]
        with tempfile.TemporaryDirectory(dir=db_dir, prefix="bench-actor-c-") as directory:
            for mode in order:
                run = throughput_run(directory, mode, seconds)
                runs[mode].append(run)
                print(f"    round {number + 1}: {run.line()}  (= rows on disk)")
    rate = {mode: statistics.median(r.rate for r in rs) for mode, rs in runs.items()}
    cpu = {mode: statistics.median(r.cpu_us for r in rs) for mode, rs in runs.items()}
    per_txn = {mode: statistics.median(r.per_txn for r in rs) for mode, rs in runs.items()}
    for mode in THROUGHPUT_MODES:
        print(
            f"    median {mode:<19} {rate[mode]:7,.0f}/s  cpu {cpu[mode]:4.0f} us/append  "
            f"{per_txn[mode]:5.1f} appends/txn"
        )
    per_round = [v.rate / d.rate for v, d in zip(runs["registry"], runs["direct one-txn"])]
    print(
        f"    registry / direct one-txn-per-append: {rate['registry'] / rate['direct one-txn']:.1f}x "
        f"(per round: {', '.join(f'{r:.1f}' for r in per_round)}; target >= 5x)"
    )
    print(
        f"    for scale: the store's own group commit without actors is "
        f"{rate['store group commit'] / rate['direct one-txn']:.1f}x the one-txn path; "
        f"registry / store group commit {rate['registry'] / rate['store group commit']:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db-dir", help="directory for the database files (default: a temp dir)")
    parser.add_argument("--appends", type=int, default=500, help="appends per latency series")
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each run of (c)")
    parser.add_argument("--rounds", type=int, default=6, help="rounds of (c); medians are compared")
    parser.add_argument("--only-c", action="store_true", help="skip (a) and (b)")
    args = parser.parse_args()
    if not args.only_c:
        with tempfile.TemporaryDirectory(dir=args.db_dir) as tmp:
            bench_latency(os.path.join(tmp, "a.db"), args.appends)
            bench_during_compaction(os.path.join(tmp, "b.db"), args.appends)
    bench_throughput(args.seconds, args.rounds, args.db_dir)


if __name__ == "__main__":
    main()
