"""What turn leases cost (prints figures; not collected by pytest).

    python -m tests.benchmarks leases [--baseline REF] [--rounds 5] [--appends 4000]

Side by side in one run, alternating which tree goes first each round, medians over
rounds, each workload in a fresh process on a fresh SQLite file:

- appends/s outside turns with this tree (every append checks the turn lease inside
  its write) and with ``--baseline`` (a git ref checked out into a temporary
  worktree; default: the last commit before turn leases), from 16 threads and from
  64 ``append_async`` tasks, 16 sessions;
- user turns/s (4 appends in ``handle.turn()``), 8 sessions, from one process and
  from two processes driving turns on the same sessions (this tree only: there the
  baseline kept turns whole inside one registry alone);
- the writes a turn costs beyond its appends, counted by the store's writer, the same 4
  appends without a turn (this tree), and how many commits of each waited for fsync.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
#: The last commit without turn leases.
BASELINE = "31ea5f9"

# Runs in the tree under test (cwd and PYTHONPATH): prints one JSON line.
WORKLOAD = r"""
import asyncio, contextlib, json, os, sys, threading, time
from actors import CompactionPolicy, SessionRegistry
from persistence import open_store
from protocol import Message

def synced(stats):  # commits that waited for fsync (a tree before unsynced turn writes has no count)
    return stats.transactions - getattr(stats, "unsynced", 0)

mode, db, count, workers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
store = open_store(db)
registry = SessionRegistry(store, policy=CompactionPolicy(lease_ttl_s=30))
started = None
if mode == "threads":
    handles = [registry.session(f"s{i % 16}") for i in range(workers)]
    barrier = threading.Barrier(workers + 1)
    def run(h):
        barrier.wait()
        for n in range(count // workers):
            h.append(Message("user", f"message {n}"))
    threads = [threading.Thread(target=run, args=(h,)) for h in handles]
    for t in threads: t.start()
    barrier.wait(); started = time.perf_counter()
    for t in threads: t.join()
    done = count // workers * workers
elif mode == "async":
    async def main():
        handles = [await registry.session_async(f"s{i % 16}") for i in range(workers)]
        async def run(h):
            for n in range(count // workers):
                await h.append_async(Message("user", f"message {n}"))
        t0 = time.perf_counter()
        await asyncio.gather(*(run(h) for h in handles))
        return t0
    started = asyncio.run(main())
    done = count // workers * workers
else:  # turns (or "bare": the same 4 appends without a turn), sessions shared with another process
    handles = [registry.session(f"t{i % 8}") for i in range(workers)]
    before, synced_before = store.write_stats().requests, synced(store.write_stats())
    def run(h):
        for n in range(count // workers):
            with h.turn() if mode == "turns" else contextlib.nullcontext():
                for k in range(4):
                    h.append(Message("user", f"turn {n} message {k}"))
    threads = [threading.Thread(target=run, args=(h,)) for h in handles]
    started = time.perf_counter()
    for t in threads: t.start()
    for t in threads: t.join()
    done = count // workers * workers
elapsed = time.perf_counter() - started
requests, synced_after = store.write_stats().requests, synced(store.write_stats())
registry.close(); store.close()
extra = syncs = None
if mode == "turns":
    extra = (requests - before - 4 * done) / done
if mode in ("turns", "bare"):
    syncs = (synced_after - synced_before) / done
print(json.dumps({"rate": done / elapsed, "extra_writes": extra, "syncs": syncs}))
"""


def _run(tree: Path, mode: str, db: str, count: int, workers: int) -> dict[str, float]:
    env = dict(os.environ, PYTHONPATH=str(tree))
    out = subprocess.run(
        [sys.executable, "-c", WORKLOAD, mode, db, str(count), str(workers)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _two_processes(tree: Path, db: str, count: int) -> float:
    """Turns/s of two processes driving turns on the same 8 sessions at once."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    _run(tree, "turns", db, 8, 8)  # the schema and the sessions, before both start
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKLOAD, "turns", db, str(count), "8"],
            cwd=tree,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    rates = []
    for proc in procs:
        out, _ = proc.communicate(timeout=600)
        rates.append(json.loads(out.strip().splitlines()[-1])["rate"])
    return sum(rates)  # each process's own rate over its own span: the two overlap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default=BASELINE, help="git ref without turn leases")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--appends", type=int, default=4000)
    parser.add_argument("--turns", type=int, default=400)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-leases-") as tmp:
        base_tree = Path(tmp) / "baseline"
        subprocess.run(
            ["git", "-C", str(HERE), "worktree", "add", "--detach", str(base_tree), args.baseline],
            check=True,
            capture_output=True,
        )
        try:
            trees = {"leases": HERE, "baseline": base_tree}
            figures: dict[str, list[float]] = {}
            for round_no in range(args.rounds):
                order = list(trees.items()) if round_no % 2 == 0 else list(trees.items())[::-1]
                for name, tree in order:
                    for mode, workers in (("threads", 16), ("async", 64)):
                        db = str(Path(tmp) / f"{name}-{mode}-{round_no}.db")
                        figures.setdefault(f"{mode} {name}", []).append(
                            _run(tree, mode, db, args.appends, workers)["rate"]
                        )
                    db = str(Path(tmp) / f"{name}-turns-{round_no}.db")
                    turns = _run(tree, "turns", db, args.turns, 8)
                    figures.setdefault(f"turns {name}", []).append(turns["rate"])
                    if name == "leases":
                        figures.setdefault("extra writes per turn", []).append(turns["extra_writes"])
                        figures.setdefault("syncs per turn", []).append(turns["syncs"])
                        db = str(Path(tmp) / f"bare-{round_no}.db")
                        bare = _run(tree, "bare", db, args.turns, 8)
                        figures.setdefault("bare", []).append(bare["rate"])
                        figures.setdefault("syncs bare", []).append(bare["syncs"])
                        db = str(Path(tmp) / f"two-{round_no}.db")
                        figures.setdefault("turns 2 processes", []).append(_two_processes(tree, db, args.turns))
            med = {k: statistics.median(v) for k, v in figures.items()}
            print(f"medians of {args.rounds} rounds (baseline {args.baseline})")
            for mode in ("threads", "async"):
                ratio = med[f"{mode} leases"] / med[f"{mode} baseline"]
                print(
                    f"appends/s {mode:8}: leases {med[f'{mode} leases']:9.0f}  baseline "
                    f"{med[f'{mode} baseline']:9.0f}  ratio {ratio:.2f}x"
                )
            print(
                f"turns/s (8 threads, 1 process): leases {med['turns leases']:.0f}  baseline "
                f"{med['turns baseline']:.0f} (turns kept whole within the registry only)"
            )
            print(f"turns/s (8 threads x 2 processes, same sessions): {med['turns 2 processes']:.0f}")
            print(
                f"4 appends/s bare, this tree (no turn): {med['bare']:.0f}; in a turn "
                f"{med['turns leases'] / med['bare']:.2f}x of that"
            )
            print(f"writes per turn beyond its 4 appends: {med['extra writes per turn']:.2f}")
            print(
                f"commits that waited for fsync per turn: {med['syncs per turn']:.2f} "
                f"(the same 4 appends without a turn: {med['syncs bare']:.2f})"
            )
        finally:
            subprocess.run(
                ["git", "-C", str(HERE), "worktree", "remove", "--force", str(base_tree)],
                check=False,
                capture_output=True,
            )


if __name__ == "__main__":
    main()
