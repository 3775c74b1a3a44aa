"""How long `delete_session` holds the SQLite write lock, seen by another writer.

Each round builds a lineage of ``--messages`` rows (every state: compacted,
superseded, live, retracted; rotated ``--rotations`` times) next to bystander
sessions of the same size, then erases it while a writer in another process, on
its own connection, commits one small transaction after another (``BEGIN
IMMEDIATE``, an INSERT into a table of its own, ``COMMIT``). The figure is how long that writer was
blocked: the longest gap between two of its commits while the erasure ran,
against its usual gap. Printed per round, then the medians.

    python tests/benchmarks/bench_delete.py [--messages 10000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sqlite3
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from persistence import open_store
from protocol import Message

BATCH = 500


def build(path: str, lineage: str, messages: int, rotations: int) -> int:
    """A lineage of at least ``messages`` rows, rotated ``rotations`` times, and one
    bystander session of the same size."""
    store = open_store(path)
    try:
        store.create_session("bystander")
        for start in range(0, messages, BATCH):
            store.append(
                "bystander",
                [Message("user", f"bystander {i} " + "x" * 80) for i in range(start, min(messages, start + BATCH))],
            )
        store.create_session(lineage)
        tip, written = lineage, 0
        per_session = messages // (rotations + 1)
        for generation in range(rotations + 1):
            goal = messages if generation == rotations else written + per_session - 2
            while written < goal:
                count = min(BATCH, goal - written)
                store.append(
                    tip, [Message("user" if i % 2 == 0 else "assistant", f"m{i} " + "y" * 80) for i in range(count)]
                )
                written += count
            if generation < rotations:  # a summary and a carried tail row per rotation
                store.append(tip, Message("assistant", "tail"))
                lease = store.acquire_lease(tip, "bench", 60)
                live = store.transcript(tip)
                record = store.commit_compaction(
                    lease, watermark=live[-2].seq, compacted=[Message("user", "summary")], mode="rotate"
                )
                tip = record.child_session_id
                written += 1
        store.retract(tip)
        total = sum(
            len(store.transcript(s.id)) + len(store.archive(s.id)) for s in store.sessions() if s.id != "bystander"
        )
        assert total >= messages, total
        return total
    finally:
        store.close()


def writer(path: str, ready, stop, out) -> None:
    """Commit tiny transactions back to back; report (commit time) for each."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=60)
    conn.execute("PRAGMA busy_timeout = 60000")
    conn.execute("CREATE TABLE IF NOT EXISTS bench_ticks (n INTEGER)")  # not a store table
    stamps = []
    ready.set()
    while not stop.is_set():
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO bench_ticks VALUES (?)", (len(stamps),))
        conn.execute("COMMIT")
        stamps.append(time.time())
    conn.close()
    out.put(stamps)


def one_round(rounds_dir: str, n: int, messages: int, rotations: int) -> dict[str, float]:
    path = os.path.join(rounds_dir, f"round{n}.db")
    lineage = f"conversation-{n}"
    total = build(path, lineage, messages, rotations)
    ctx = multiprocessing.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    proc = ctx.Process(target=writer, args=(path, ready, stop, out))
    proc.start()
    ready.wait(30)
    store = open_store(path)
    try:
        time.sleep(0.5)  # the writer's usual pace first
        began = time.time()
        erased = store.delete_session(lineage)
        ended = time.time()
        time.sleep(0.5)
    finally:
        stop.set()
        stamps = out.get(timeout=60)
        proc.join(30)
        store.close()
    assert erased == total, (erased, total)
    gaps = [(b - a, a, b) for a, b in zip(stamps, stamps[1:])]
    during = [g for g, a, b in gaps if b >= began and a <= ended]
    usual = [g for g, a, b in gaps if b < began]
    return {
        "erased": erased,
        "delete_ms": (ended - began) * 1000,
        "writer_blocked_ms": max(during) * 1000 if during else 0.0,
        "writer_usual_ms": statistics.median(usual) * 1000,
        "writer_commits": len(stamps),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rotations", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = []
        for n in range(args.rounds):
            r = one_round(tmp, n, args.messages, args.rotations)
            results.append(r)
            print(
                f"round {n}: erased {r['erased']} messages in {r['delete_ms']:.0f} ms; "
                f"the other writer was blocked at most {r['writer_blocked_ms']:.0f} ms "
                f"(its usual commit gap {r['writer_usual_ms']:.2f} ms)",
                flush=True,
            )
    print(
        f"median over {args.rounds} rounds: delete_session of a {args.messages}-message lineage "
        f"took {statistics.median(r['delete_ms'] for r in results):.0f} ms; a concurrent writer on "
        f"another connection was blocked at most "
        f"{statistics.median(r['writer_blocked_ms'] for r in results):.0f} ms "
        f"(worst round {max(r['writer_blocked_ms'] for r in results):.0f} ms)"
    )


if __name__ == "__main__":
    main()
