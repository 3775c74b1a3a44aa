"""What the indexes schema versions 4 and 5 dropped cost an append (SQLite).

Fresh store files side by side: the current schema; the same with schema 4's full
indexes on ``origin_id`` and ``archived_at`` again (version 5 made them partial:
an appended row has neither, yet took an entry in each); and the same with
version 3's ``messages_session_state_idx`` created again (the per-session index
version 4 removed). Same code, same load, rounds alternating:

- ``writer``: the group commit's own SQLite work, one thread, 64 sessions, 64 rows
  per COMMIT through the store's multi-row INSERT (``synchronous=FULL``, as the
  store runs): CPU and wall time per row;
- ``registry async``: 64 asyncio tasks on one loop, ``await handle.append_async``
  (the path where the writer is the bottleneck): appends/s.

Not collected by pytest.

    python -m tests.benchmarks.bench_schema
    python -m tests.benchmarks.bench_schema --rounds 5 --seconds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from persistence.queries import load_queries
from tests.benchmarks.bench_agents import time_boxed_async
from tests.benchmarks.timeboxed import client_messages

SESSIONS = 64
OLDER_INDEXES = {
    "v5 + full v4 indexes": [
        "DROP INDEX messages_origin_idx", "CREATE INDEX messages_origin_idx ON messages (origin_id)",
        "DROP INDEX messages_archived_idx", "CREATE INDEX messages_archived_idx ON messages (archived_at)",
    ],
    "v5 + v3 index": ["CREATE INDEX messages_session_state_idx ON messages (session_id, state, seq)"],
}
VARIANTS = ("v5", *OLDER_INDEXES)


def fresh_store_file(directory: str, variant: str, tag: str) -> str:
    path = os.path.join(directory, f"{tag}-{variant.replace(' ', '_')}.db")
    store = open_store(path)
    for k in range(SESSIONS):
        store.create_session(f"s{k}")
    store.close()
    if variant in OLDER_INDEXES:
        conn = sqlite3.connect(path)
        for statement in OLDER_INDEXES[variant]:
            conn.execute(statement)
        conn.commit()
        conn.close()
    return path


def writer_cost(path: str, commits: int) -> tuple[float, float]:
    """(CPU us, wall us) per row of 64-row commits through the store's bulk INSERT."""
    q = load_queries("sqlite")
    sql = q["insert_messages_head"] + "\n" + ",\n".join([q["insert_messages_row"]] * SESSIONS)
    content = json.dumps("client message " + "x" * 200)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = FULL")
    began, cpu_began = time.perf_counter(), time.process_time()
    for seq in range(1, commits + 1):
        values = []
        for k in range(SESSIONS):
            values += [f"s{k}", seq, "user", content, None, None, None, "{}", time.time()]
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(sql, values)
        conn.execute("COMMIT")
    wall, cpu = time.perf_counter() - began, time.process_time() - cpu_began
    conn.close()
    rows = commits * SESSIONS
    return cpu / rows * 1e6, wall / rows * 1e6


def registry_async_rate(path: str, seconds: float) -> float:
    store = open_store(path)
    try:
        with SessionRegistry(store, policy=CompactionPolicy(max_resident=2 * SESSIONS)) as registry:
            handles = [registry.session(f"s{k}") for k in range(SESSIONS)]
            messages = [client_messages(k) for k in range(SESSIONS)]
            acked, elapsed, _ = asyncio.run(time_boxed_async(
                [h.append_async for h in handles], messages, seconds))
    finally:
        store.close()
    return acked / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each async run")
    parser.add_argument("--commits", type=int, default=600, help="64-row commits per writer run")
    args = parser.parse_args()
    cpu = {v: [] for v in VARIANTS}
    wall = {v: [] for v in VARIANTS}
    rate = {v: [] for v in VARIANTS}
    print(f"load average {'/'.join(f'{x:.1f}' for x in os.getloadavg())} at the start")
    with tempfile.TemporaryDirectory(prefix="bench-schema-") as directory:
        for number in range(args.rounds):
            order = VARIANTS if number % 2 == 0 else VARIANTS[::-1]
            for variant in order:
                c, w = writer_cost(fresh_store_file(directory, variant, f"w{number}"), args.commits)
                r = registry_async_rate(fresh_store_file(directory, variant, f"a{number}"), args.seconds)
                cpu[variant].append(c)
                wall[variant].append(w)
                rate[variant].append(r)
                print(f"  round {number + 1}: {variant:<20} writer {c:5.1f} us CPU, {w:5.1f} us wall "
                      f"per row; registry async {r:8,.0f}/s")
    for variant in VARIANTS:
        print(f"  median {variant:<20} writer {statistics.median(cpu[variant]):5.1f} us CPU, "
              f"{statistics.median(wall[variant]):5.1f} us wall per row; registry async "
              f"{statistics.median(rate[variant]):8,.0f}/s")
    new = VARIANTS[0]
    for old in OLDER_INDEXES:
        print(f"  {new} / {old}: writer CPU per row {statistics.median(cpu[new]) / statistics.median(cpu[old]):.2f}, "
              f"registry async {statistics.median(rate[new]) / statistics.median(rate[old]):.2f}x (per round: "
              f"{', '.join(f'{a / b:.2f}' for a, b in zip(rate[new], rate[old]))})")


if __name__ == "__main__":
    main()
