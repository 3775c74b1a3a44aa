"""Real processes sharing one SQLite file: appends, leases and compactions stay consistent.

Four ``spawn`` processes append to shared sessions, take leases (some released,
some abandoned to expire), and compact under their leases. Each writes what it
was acknowledged to a JSON file; the parent then checks the database: no lost
or duplicated rows, gapless seqs, unique tokens, and lease intervals that never
overlap on the store's clock.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import sqlite3
import stat
import traceback
from collections import defaultdict
from pathlib import Path

import pytest

from persistence._migrations import latest_version
from persistence.sqlite import SqliteStore
from protocol import Message

PROCESSES = 4
ITERATIONS = 120
SESSIONS = ("shared-0", "shared-1", "shared-2")
ABANDON_TTL = 0.05
HOLD_TTL = 30.0


def _hold_and_compact(store: SqliteStore, sid: str, lease, name: str, log: dict) -> None:
    """While holding the lease: compact in place, mark the exit, release."""
    live = store.transcript(sid)
    if len(live) >= 2:
        store.commit_compaction(
            lease,
            watermark=live[-1].seq,
            compacted=[Message("user", f"[CONTEXT COMPACTION] by {name}")],
            mode="in_place",
            compressor=name,
        )
    exit_mark = store.append(sid, Message("assistant", f"exit {lease.token}", meta={"marker": True}))[0]
    log["intervals"].append([sid, lease.token, name, lease.acquired_at, exit_mark.created_at])
    log["acked"].append([sid, exit_mark.id, exit_mark.content])
    assert store.release_lease(lease)


def worker(path: str, n: int, barrier, out_path: str) -> None:
    log: dict = {"acked": [], "intervals": [], "error": None}
    name = f"proc{n}"
    rng = random.Random(n)
    try:
        store = SqliteStore(path, patience_s=30.0)
        try:
            barrier.wait(timeout=60)
            for i in range(ITERATIONS):
                sid = rng.choice(SESSIONS)
                batch = [Message("user", f"{name}-{i}-{k}") for k in range(rng.randint(1, 2))]
                for m in store.append(sid, batch):
                    log["acked"].append([sid, m.id, m.content])
                if i % 4 == 0:
                    lease = store.acquire_lease(sid, name, HOLD_TTL)
                    if lease is not None:
                        _hold_and_compact(store, sid, lease, name, log)
                elif i % 9 == 0:
                    lease = store.acquire_lease(sid, name, ABANDON_TTL)
                    if lease is not None:  # never released: another process takes it over
                        log["intervals"].append([sid, lease.token, name, lease.acquired_at, lease.expires_at])
        finally:
            store.close()
    except BaseException:
        log["error"] = traceback.format_exc()
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(log, fh)


@pytest.mark.timeout(120)
def test_processes_share_one_file_without_loss_or_overlap(tmp_path):
    path = str(tmp_path / "shared.db")
    setup = SqliteStore(path)
    for sid in SESSIONS:
        setup.create_session(sid)
    setup.close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    outs = [str(tmp_path / f"p{n}.json") for n in range(PROCESSES)]
    procs = [ctx.Process(target=worker, args=(path, n, barrier, outs[n])) for n in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=100)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    logs = [json.loads(Path(o).read_text(encoding="utf-8")) for o in outs]
    errors = [log["error"] for log in logs if log["error"]]
    assert not errors, errors[0]  # includes any "database is locked" reaching a caller

    store = SqliteStore(path)
    try:
        _check_rows(store, logs)
        _check_leases(store, logs)
    finally:
        store.close()


def _check_rows(store: SqliteStore, logs: list[dict]) -> None:
    acked = [tuple(a) for log in logs for a in log["acked"]]
    assert len({a[1] for a in acked}) == len(acked)  # ids unique across processes
    for sid in SESSIONS:
        rows = store.transcript(sid) + store.archive(sid)
        by_id = {m.id: m for m in rows}
        assert sorted(m.seq for m in rows) == list(range(1, len(rows) + 1))  # no gaps, no dups
        mine = [a for a in acked if a[0] == sid]
        for _, msg_id, content in mine:  # nothing acknowledged is lost
            assert by_id[msg_id].content == content
        originals = [m for m in rows if m.origin_id is None and not m.text.startswith("[CONTEXT")]
        assert sorted(m.id for m in originals) == sorted(a[1] for a in mine)  # nothing duplicated
        # every live row that is a copy points at a superseded original (a carried
        # tail row) or at a compacted row it repeats verbatim (a summary written again)
        for m in store.transcript(sid):
            if m.origin_id is not None:
                original = by_id[m.origin_id]
                assert original.state == "superseded" or (
                    original.state == "compacted" and original.as_message() == m.as_message()
                )
        tokens = [r.token for r in store.compactions(sid)]
        assert tokens == sorted(set(tokens))


def _check_leases(store: SqliteStore, logs: list[dict]) -> None:
    """Tokens are unique and follow acquisition order; a lease of another holder never
    begins before the previous one ended (released after its exit mark, or expired).
    The same holder may re-acquire early: that supersedes its own older token."""
    intervals: dict[str, list[tuple[int, str, float, float]]] = defaultdict(list)
    for log in logs:
        for sid, token, holder, start, end in log["intervals"]:
            intervals[sid].append((token, holder, start, end))
    assert sum(len(v) for v in intervals.values()) >= PROCESSES  # leases really happened
    holders = {h for spans in intervals.values() for _, h, _, _ in spans}
    assert len(holders) >= 2
    for sid, spans in intervals.items():
        spans.sort()
        tokens = [t for t, _, _, _ in spans]
        assert len(set(tokens)) == len(tokens), f"{sid}: duplicate tokens {tokens}"
        assert [s for _, _, s, _ in spans] == sorted(s for _, _, s, _ in spans)
        for (t1, h1, s1, e1), (t2, h2, s2, _) in zip(spans, spans[1:]):
            assert s1 <= e1
            if h1 != h2:
                assert s2 >= e1, f"{sid}: {h2} token {t2} began at {s2} before {h1} token {t1} ended at {e1}"


def opener(path: str, n: int, barrier, out_path: str) -> None:
    """Open a brand-new file at the same moment as the others, then write to it."""
    result = {"error": None}
    try:
        barrier.wait(timeout=60)
        store = SqliteStore(path)
        try:
            store.create_session(f"opener-{n}")
            store.append(f"opener-{n}", Message("user", f"hello from {n}"))
        finally:
            store.close()
    except BaseException:
        result["error"] = traceback.format_exc()
    with open(out_path, "w", encoding="utf-8") as fh:
        json.dump(result, fh)


@pytest.mark.timeout(120)
def test_processes_creating_one_new_file_migrate_it_once(tmp_path):
    path = str(tmp_path / "fresh.db")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(PROCESSES)
    outs = [str(tmp_path / f"o{n}.json") for n in range(PROCESSES)]
    procs = [ctx.Process(target=opener, args=(path, n, barrier, outs[n])) for n in range(PROCESSES)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=100)
    assert all(p.exitcode == 0 for p in procs)
    errors = [e for o in outs if (e := json.loads(Path(o).read_text(encoding="utf-8"))["error"])]
    assert not errors, errors[0]
    conn = sqlite3.connect(path)
    try:
        versions = conn.execute("SELECT version FROM schema_version ORDER BY version").fetchall()
        assert versions == [(v,) for v in range(1, latest_version("sqlite") + 1)]
        assert conn.execute("SELECT count(*) FROM messages").fetchone() == (PROCESSES,)
    finally:
        conn.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
