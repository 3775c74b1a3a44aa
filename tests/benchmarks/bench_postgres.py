"""PostgreSQL append throughput: the registry and the store vs a naive psycopg loop.

64 client threads append to 64 sessions (client k writes session k), the same
prebuilt ~230-byte user messages in every mode, on the local server in an
isolated schema:

- ``registry``: `SessionRegistry` handles on a `PostgresStore` (group commit);
- ``store``: ``PostgresStore.append`` called directly (group commit);
- ``naive psycopg``: what an application would write without this library: 64
  connections, one autocommit ``INSERT`` into the same ``messages`` table per
  append (seq counted by the client, which owns its session; JSON encoded the
  same way), so every append is its own transaction and its own WAL flush.

Each run is time-boxed (``--seconds``); an unrecorded warm-up of each mode comes
first, then ``--rounds`` rounds rotate which mode goes first and the medians are
compared (per-round ratios printed too). After each run the acknowledged appends
are compared with the rows in the table. The machine may be shared: read the
ratios, which are measured side by side, rather than the absolute figures.

Each round also prints the load average and the oldest transaction snapshot other
clients of the database held when it ended: group commit updates each session's
row (``next_seq``) once per batch, and while an older snapshot pins the xmin
horizon those row versions cannot be pruned, so every look-up of a session walks
them (a store writing alone is not slowed). The naive loop never updates a
session row. Not collected by pytest.

    python -m tests.benchmarks.bench_postgres
    python -m tests.benchmarks.bench_postgres --seconds 2 --rounds 7 --commits 20
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections.abc import Callable

from actors import CompactionPolicy, SessionRegistry
from persistence._rows import message_params
from persistence.postgres import PostgresStore
from protocol import Message
from tests.benchmarks.timeboxed import Run, time_boxed
from tests.pg import isolated_postgres_url, pg_rows

SESSIONS = 64
MODES = ("registry", "store", "naive psycopg")
NAIVE_INSERT = """
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
                      created_at)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, extract(epoch FROM clock_timestamp()))"""


#: Age of the oldest snapshot another client of this database holds (s), if any.
OLDEST_SNAPSHOT = """
SELECT coalesce(max(extract(epoch FROM clock_timestamp() - xact_start)), 0) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid() AND backend_xmin IS NOT NULL"""


def conditions(url: str) -> str:
    """The load average and the oldest snapshot others hold, for a round's line."""
    held = pg_rows(url, OLDEST_SNAPSHOT)[0][0]
    return f"load {os.getloadavg()[0]:.1f}" + (f", a {held:.1f} s old snapshot held" if held >= 0.1 else "")


def rows_of(url: str, prefix: str) -> int:
    return pg_rows(url, "SELECT count(*) FROM messages WHERE session_id LIKE %s", (prefix + "%",))[0][0]


def naive_clients(url: str, ids: list[str]) -> tuple[list[Callable[[Message], object]], Callable[[], None]]:
    """One autocommit connection per client; returns the appenders and a closer."""
    import psycopg

    conns = [psycopg.connect(url, autocommit=True) for _ in ids]
    for conn, sid in zip(conns, ids):
        conn.execute("INSERT INTO sessions (id, source, created_at) VALUES (%s, 'bench', 0)", (sid,))

    def appender(conn, sid: str) -> Callable[[Message], object]:
        seq = [0]

        def append(message: Message) -> None:
            seq[0] += 1
            p = message_params(message, None)
            conn.execute(
                NAIVE_INSERT,
                (sid, seq[0], p["role"], p["content"], p["name"], p["tool_call_id"], p["tool_calls"], p["meta"]),
            )

        return append

    def close() -> None:
        for conn in conns:
            conn.close()

    return [appender(c, sid) for c, sid in zip(conns, ids)], close


def run_mode(url: str, store: PostgresStore, mode: str, tag: str, seconds: float) -> Run:
    prefix = f"{tag}-{mode.replace(' ', '-')}-"
    ids = [f"{prefix}{k}" for k in range(SESSIONS)]
    before = store.write_stats().transactions
    if mode == "registry":
        with SessionRegistry(store, policy=CompactionPolicy(max_resident=SESSIONS * 2)) as registry:
            handles = [registry.session(sid) for sid in ids]  # actors started before the clock
            before = store.write_stats().transactions
            acked, elapsed, cpu = time_boxed([h.append for h in handles], seconds)
    elif mode == "store":
        for sid in ids:
            store.create_session(sid)
        before = store.write_stats().transactions
        acked, elapsed, cpu = time_boxed([lambda m, sid=sid: store.append(sid, m) for sid in ids], seconds)
    else:
        appenders, close = naive_clients(url, ids)
        try:
            acked, elapsed, cpu = time_boxed(appenders, seconds)
        finally:
            close()
        before = None
    transactions = acked if before is None else store.write_stats().transactions - before
    stored = rows_of(url, prefix)
    assert stored == acked, f"{mode}: {acked} appends acknowledged, {stored} rows in the table"
    return Run(mode, acked, elapsed, cpu, transactions)


def bench_throughput(url: str, seconds: float, rounds: int) -> None:
    store = PostgresStore(url, max_size=4)
    try:
        for mode in MODES:  # warm-up, not recorded
            run_mode(url, store, mode, "warm", min(seconds, 0.5))
        runs: dict[str, list[Run]] = {mode: [] for mode in MODES}
        print(
            f"durable appends/s, {SESSIONS} client threads x {SESSIONS} sessions, "
            f"{seconds:g} s per run, {rounds} rounds, order rotating:"
        )
        for number in range(rounds):
            shift = number % len(MODES)
            for mode in MODES[shift:] + MODES[:shift]:
                run = run_mode(url, store, mode, f"r{number}", seconds)
                runs[mode].append(run)
                print(f"  round {number + 1}: {run.line()}  (= rows in the table; {conditions(url)})")
    finally:
        store.close()
    rate = {mode: statistics.median(r.rate for r in rs) for mode, rs in runs.items()}
    for mode in MODES:
        cpu = statistics.median(r.cpu_us for r in runs[mode])
        per_txn = statistics.median(r.per_txn for r in runs[mode])
        print(f"  median {mode:<14} {rate[mode]:7,.0f}/s  cpu {cpu:4.0f} us/append  {per_txn:5.1f} appends/txn")
    for mode in ("registry", "store"):
        per_round = [a.rate / b.rate for a, b in zip(runs[mode], runs["naive psycopg"])]
        print(
            f"  {mode} / naive psycopg: {rate[mode] / rate['naive psycopg']:.2f}x "
            f"(per round: {', '.join(f'{r:.2f}' for r in per_round)})"
        )
    print(f"  registry / store: {rate['registry'] / rate['store']:.2f}")


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
            store.commit_compaction(
                lease,
                watermark=snapshot[-1].seq,
                compacted=[Message("user", f"[CONTEXT COMPACTION] {n}")],
                mode="in_place",
            )
            out.append(time.perf_counter() - started)
            store.release_lease(lease)
            store.append("compact-me", [Message("user", f"r{n}-{i}") for i in range(50)])
    finally:
        stop.set()
        thread.join()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each run")
    parser.add_argument("--rounds", type=int, default=5, help="rounds; medians are compared")
    parser.add_argument("--commits", type=int, default=0, help="also time N compaction commits")
    args = parser.parse_args()
    with isolated_postgres_url() as url:
        bench_throughput(url, args.seconds, args.rounds)
        if args.commits:
            with PostgresStore(url) as store:
                lat = commit_latencies(store, args.commits)
            print(
                f"{len(lat)} in-place commits with a live writer: median "
                f"{statistics.median(lat) * 1000:.1f} ms, max {max(lat) * 1000:.1f} ms"
            )


if __name__ == "__main__":
    main()
