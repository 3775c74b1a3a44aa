"""Durable appends/s by the number of release chains a committed batch's callers form.

After a group commit the writer releases the waiting callers in
``persistence.batching.RELEASE_CHAINS`` interleaved chains (each woken caller
releases the next of its chain). This script varies that number in one process
and measures ``store.append`` from 64 threads (one session each) side by side:
rounds rotate which count goes first, every run on a fresh database, medians and
per-round ratios to one chain are printed. Also prints how long a woken thread
takes to run here (a lock ping-pong), the latency the chains overlap.

    python -m tests.benchmarks.bench_chains
    python -m tests.benchmarks.bench_chains --chains 1 2 4 8 --rounds 7
    python -m tests.benchmarks.bench_chains --postgres postgresql://postgres@127.0.0.1:5432/test

Not collected by pytest.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
import uuid

from persistence import batching, open_store
from tests.benchmarks.timeboxed import Run, time_boxed

SESSIONS = 64


def run_once(target: str, chains: int, seconds: float) -> Run:
    """64 threads append for ``seconds`` with ``chains`` release chains."""
    batching.RELEASE_CHAINS = chains
    store = open_store(target)
    try:
        ids = [f"chains-{uuid.uuid4().hex[:12]}-{k}" for k in range(SESSIONS)]
        for sid in ids:
            store.create_session(sid)
        before = store.write_stats()
        acked, elapsed, cpu = time_boxed([lambda m, s=sid: store.append(s, m) for sid in ids], seconds)
        after = store.write_stats()
        stored = sum(len(store.transcript(sid)) for sid in ids)
        if "://" in target:  # a shared PostgreSQL database: leave it as found
            for sid in ids:
                store.delete_session(sid)
    finally:
        store.close()
    assert stored == acked, f"{acked} acknowledged, {stored} stored"
    return Run(f"{chains} chain(s)", acked, elapsed, cpu, after.transactions - before.transactions)


def wake_latency_us(round_trips: int = 5000) -> float:
    """One lock ping-pong between two threads, per round trip (two wake-ups)."""
    ping, pong = threading.Lock(), threading.Lock()
    ping.acquire()
    pong.acquire()

    def partner() -> None:
        for _ in range(round_trips):
            ping.acquire()
            pong.release()

    thread = threading.Thread(target=partner)
    thread.start()
    began = time.perf_counter()
    for _ in range(round_trips):
        ping.release()
        pong.acquire()
    elapsed = time.perf_counter() - began
    thread.join()
    return elapsed / round_trips * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--seconds", type=float, default=2.0, help="length of each run")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are compared")
    parser.add_argument("--postgres", default=None, help="a PostgreSQL URL instead of a SQLite file")
    args = parser.parse_args()
    default = batching.RELEASE_CHAINS
    runs: dict[int, list[Run]] = {k: [] for k in args.chains}
    with tempfile.TemporaryDirectory(prefix="bench-chains-") as directory:
        def target(tag: str) -> str:
            return args.postgres or os.path.join(directory, f"{tag}.db")

        for k in args.chains:  # warm-up, not recorded
            run_once(target(f"warm-{k}"), k, 0.3)
        print(f"{SESSIONS} threads x one session each, {'PostgreSQL' if args.postgres else 'SQLite'}, "
              f"{args.seconds:g} s a run, {args.rounds} rotating rounds; the store's default is {default}; "
              f"a lock ping-pong here: {wake_latency_us():.0f} us a round trip")
        for number in range(args.rounds):
            shift = number % len(args.chains)
            for k in args.chains[shift:] + args.chains[:shift]:
                run = run_once(target(f"r{number}-{k}"), k, args.seconds)
                runs[k].append(run)
                print(f"  round {number + 1}: {run.line()}")
    batching.RELEASE_CHAINS = default
    base = runs[args.chains[0]]
    for k, rs in runs.items():
        per_round = ", ".join(f"{a.rate / b.rate:.2f}" for a, b in zip(rs, base))
        print(f"  median {k} chain(s): {statistics.median(r.rate for r in rs):7,.0f}/s  "
              f"cpu {statistics.median(r.cpu_us for r in rs):4.0f} us/append  "
              f"{statistics.median(r.per_txn for r in rs):5.1f} appends/txn  "
              f"/ {args.chains[0]} chain(s): {statistics.median(r.rate for r in rs) / statistics.median(b.rate for b in base):.2f} "
              f"(per round: {per_round})")


if __name__ == "__main__":
    main()
