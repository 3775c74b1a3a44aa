"""The archive at scale: what the search index costs appends and compactions, how
fast a search is over 1,000,000 archived messages, and how long an erasure blocks
another writer.

1. Append cost. 16 threads append to 16 sessions of one store (group commit,
   durable), messages of ~40 words of text (what the index tokenizes). Each
   backend runs twice side by side: as it is, and with its search index dropped
   (SQLite: the FTS5 table and its triggers; PostgreSQL: the GIN index), in
   rotating rounds; the ratio of medians is the cost (goal: >= 0.9x). The index
   holds the archive only, so what it costs falls on compaction instead: then the
   commit of a compaction that archives 2,000 such messages, indexed and not
   (median of 5 each, alternating).
2. Search latency. A SQLite file (and a PostgreSQL schema with ``--postgres``)
   holding ``--messages`` archived messages in sessions of 10, built in bulk,
   then each query run 21 times: a word in 10 messages, one in 1,000, one in
   every tenth message, two words, one session's lineage, live rows only.
   Printed: the median and the slowest, in milliseconds.
3. Erasure (`bench_delete`): how long `delete_session` blocks another writer.

    python -m tests.benchmarks archive                      # about 3 minutes
    python -m tests.benchmarks archive --messages 100000 --postgres --skip-delete
"""

from __future__ import annotations

import argparse
import itertools
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from persistence import open_store
from persistence.sqlite import SqliteStore
from protocol import Message
from tests.benchmarks import bench_delete
from tests.benchmarks.timeboxed import Run, printed_medians, printed_ratios, rotating_rounds, time_boxed

CALLERS = 16
VOCABULARY = [f"w{n}" for n in range(20_000)]
#: (label, query, keyword args): the searches of part 2
QUERIES = [
    ("rare word (10 hits)", "zyzzyva", {}),
    ("word in 1,000", "quokka", {}),
    ("word in every 10th", "common", {"limit": 20}),
    ("two words", "quokka common", {}),
    ("one lineage, frequent word", "common", {"session_id": "MIDDLE"}),
    ("live rows only", "quokka", {"archived": False}),
]


def words(rng: random.Random, n: int) -> str:
    """``n`` words, a few frequent and most rare (log-uniform ranks, as in prose)."""
    return " ".join(VOCABULARY[int(len(VOCABULARY) ** rng.random()) - 1] for _ in range(n))


# -- part 1: append cost -------------------------------------------------------------


def drop_index(backend: str, url: str) -> None:
    """The store without its search index: what appends cost before the index."""
    if backend == "sqlite":
        conn = sqlite3.connect(url)
        for trigger in (
            "message_search_archive",
            "message_search_erase",
            "message_search_prune",
        ):
            conn.execute(f"DROP TRIGGER {trigger}")
        conn.execute("DROP TABLE message_search")
        conn.commit()
        conn.close()
    else:
        from tests.pg import pg_rows

        pg_rows(url, "DROP INDEX messages_search_idx")


def append_run(backend: str, url: str, indexed: bool, seconds: float, mode: str, *, prefix: str = "") -> Run:
    """16 callers appending to 16 new sessions (ids ``prefix`` + s0..s15) for ``seconds``."""
    open_store(url).close()  # migrated
    if not indexed:
        drop_index(backend, url)
    store = open_store(url)
    rng = random.Random(7)
    try:
        appenders: list[Callable[[Message], object]] = []
        for k in range(CALLERS):
            sid = f"{prefix}s{k}"
            store.create_session(sid)
            cycle = itertools.cycle([Message("user", words(rng, 40)) for _ in range(32)])
            appenders.append(lambda _m, sid=sid, cycle=cycle: store.append(sid, next(cycle)))
        total, elapsed, cpu = time_boxed(appenders, seconds)
        return Run(mode, total, elapsed, cpu, 0)
    finally:
        store.close()


@contextmanager
def fresh_url(backend: str, directory: str, tag: str) -> Iterator[str]:
    if backend == "sqlite":
        yield f"{directory}/{tag}.db"
        return
    from tests.pg import isolated_postgres_url

    with isolated_postgres_url() as url:
        yield url


def append_cost(backends: list[str], seconds: float, rounds: int) -> None:
    modes = [f"{b} {kind}" for b in backends for kind in ("indexed", "no index")]

    def run_mode(directory: str, mode: str, secs: float, tag: str) -> Run:
        backend, kind = mode.split(" ", 1)
        with fresh_url(backend, directory, f"{mode.replace(' ', '-')}-{tag}") as url:
            return append_run(backend, url, kind == "indexed", secs, mode)

    runs = rotating_rounds(modes, run_mode, rounds=rounds, seconds=seconds, directory=None, sessions=CALLERS)
    rate = printed_medians(runs)
    printed_ratios(runs, rate, [(f"{b} indexed", f"{b} no index") for b in backends])


def commit_time(backend: str, url: str, indexed: bool, messages: int) -> float:
    """Seconds to commit one compaction archiving ``messages`` live messages."""
    open_store(url).close()
    if not indexed:
        drop_index(backend, url)
    store = open_store(url)
    rng = random.Random(3)
    try:
        store.create_session("c")
        for start in range(0, messages, 500):
            store.append("c", [Message("user", words(rng, 40)) for _ in range(min(500, messages - start))])
        lease = store.acquire_lease("c", "bench", 60)
        began = time.perf_counter()
        store.commit_compaction(lease, watermark=messages, compacted=[Message("user", "summary")], mode="in_place")
        return time.perf_counter() - began
    finally:
        store.close()


def compaction_cost(backends: list[str], messages: int = 2000, rounds: int = 5) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-archive-") as directory:
        for backend in backends:
            times: dict[bool, list[float]] = {True: [], False: []}
            for n in range(rounds):
                for indexed in (True, False) if n % 2 == 0 else (False, True):
                    with fresh_url(backend, directory, f"commit-{indexed}-{n}") as url:
                        times[indexed].append(commit_time(backend, url, indexed, messages))
            with_index, without = (statistics.median(times[k]) * 1000 for k in (True, False))
            print(
                f"  {backend}: a compaction archiving {messages:,} messages commits in {with_index:.0f} ms "
                f"indexed, {without:.0f} ms without ({with_index / without:.2f}x)"
            )


# -- part 2: search latency -------------------------------------------------------------


def archived_rows(messages: int) -> Iterator[tuple[str, int, str]]:
    """(session id, seq, text) of ``messages`` archived rows in sessions of 10; the
    query words planted at known frequencies."""
    rng = random.Random(11)
    for n in range(messages):
        text = words(rng, 30)
        if n % 10 == 3:
            text += " common"
        if n % max(10, messages // 1000) == 3:  # with "common" too
            text += " quokka"
        if n % max(1, messages // 10) == 7:
            text += " zyzzyva"
        yield f"s-{n // 10}", n % 10 + 1, text


def build_sqlite(path: str, messages: int) -> None:
    SqliteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA synchronous=OFF")
    sessions = (messages + 9) // 10
    conn.executemany(
        "INSERT INTO sessions (id, source, created_at, next_seq, live_from) VALUES (?, 'bench', 0, 11, 11)",
        ((f"s-{i}",) for i in range(sessions)),
    )
    rows = archived_rows(messages)
    while batch := list(itertools.islice(rows, 50_000)):
        conn.executemany(
            "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES (?, ?, 'user', json_quote(?), 0)",
            batch,
        )
        # archived as a compaction archives them: the index takes them then
        conn.execute("UPDATE messages SET state = 'compacted', archived_at = 1 WHERE state = 'live'")
        conn.commit()
    # every session ends with a live row, which "live rows only" can find
    conn.executemany(
        "INSERT INTO messages (session_id, seq, role, content, created_at) VALUES (?, 11, 'user', ?, 0)",
        ((f"s-{i}", '"a live quokka"' if i % 100 == 0 else '"live"') for i in range(sessions)),
    )
    conn.commit()
    conn.close()


def build_postgres(url: str, messages: int) -> None:
    import psycopg

    open_store(url).close()
    sessions = (messages + 9) // 10
    with psycopg.connect(url) as conn, conn.cursor() as cur:
        with cur.copy("COPY sessions (id, source, created_at, next_seq, live_from) FROM STDIN") as copy:
            for i in range(sessions):
                copy.write_row((f"s-{i}", "bench", 0, 11, 11))
        with cur.copy(
            "COPY messages (session_id, seq, role, content, created_at, state, archived_at) FROM STDIN"
        ) as copy:
            import json

            for sid, seq, text in archived_rows(messages):
                copy.write_row((sid, seq, "user", json.dumps(text), 0, "compacted", 1))
            for i in range(sessions):
                copy.write_row((f"s-{i}", 11, "user", '"a live quokka"' if i % 100 == 0 else '"live"', 0, "live", None))
        cur.execute("ANALYZE messages")


def latencies(url: str, label: str, messages: int) -> None:
    store = open_store(url)
    middle = f"s-{messages // 20}"  # a session halfway through (sessions of 10)
    try:
        for name, query, kwargs in QUERIES:
            kwargs = {k: middle if v == "MIDDLE" else v for k, v in kwargs.items()}
            times, hits = [], 0
            for _ in range(21):
                began = time.perf_counter()
                hits = len(store.search(query, **kwargs))
                times.append((time.perf_counter() - began) * 1000)
            print(
                f"  {label:<10} {name:<28} {hits:>3} hits  median {statistics.median(times):7.1f} ms  slowest {max(times):7.1f} ms"
            )
    finally:
        store.close()


def search_latency(messages: int, postgres: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="bench-archive-") as directory:
        path = f"{directory}/archive.db"
        began = time.perf_counter()
        build_sqlite(path, messages)
        print(
            f"  built {messages:,} archived messages in SQLite (indexed as they were archived) in {time.perf_counter() - began:.0f} s"
        )
        latencies(path, "sqlite", messages)
    if postgres:
        from tests.pg import isolated_postgres_url

        with isolated_postgres_url() as url:
            began = time.perf_counter()
            build_postgres(url, messages)
            print(f"  built {messages:,} archived messages in PostgreSQL in {time.perf_counter() - began:.0f} s")
            latencies(url, "postgres", messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="archived messages searched")
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each append run")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--postgres", action="store_true", help="PostgreSQL too (SESSION_ACTORS_PG_URL)")
    parser.add_argument("--skip-delete", action="store_true", help="leave out part 3")
    args = parser.parse_args()
    backends = ["sqlite", "postgres"] if args.postgres else ["sqlite"]
    print(f"1. what the search index costs appends ({CALLERS} callers, ~40-word messages):", flush=True)
    append_cost(backends, args.seconds, args.rounds)
    compaction_cost(backends)
    print(f"\n2. search latency over {args.messages:,} archived messages:", flush=True)
    search_latency(args.messages, args.postgres)
    if not args.skip_delete:
        print("\n3. erasure: how long delete_session blocks another writer (bench_delete):", flush=True)
        import sys

        sys.argv = [sys.argv[0]]
        bench_delete.main()


if __name__ == "__main__":
    main()
