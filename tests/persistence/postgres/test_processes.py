"""Several real processes, each with its own `PostgresStore`, on one schema.

Workers append to and compact the same sessions through raw store calls with
leases (rotations and in-place compactions racing), then the parent checks the
database directly: no session has two children, no acknowledged append is
missing, no lease is left held, seqs have no gaps and follow commit order, and
every archived message was in the snapshot its compactor read.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import time
from collections import Counter
from typing import Any

import pytest

from persistence.postgres import PostgresStore
from protocol import LeaseLostError, Message, SessionEndedError
from tests.pg import pg_rows

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(90)]

SPAWN = multiprocessing.get_context("spawn")
RESULT_WAIT_S = 60.0


# ---------------------------------------------------------------- worker side


def append_following(store: PostgresStore, session_id: str, message: Message) -> tuple[str, Any, float, float]:
    """Append to ``session_id``, following rotations to the live successor."""
    while True:
        started = time.monotonic()
        try:
            [stored] = store.append(session_id, message)
            return session_id, stored, started, time.monotonic()
        except SessionEndedError as exc:
            successor = exc.successor_id or store.resolve(session_id)
            if successor == session_id:
                raise  # ended for good (not by compression): a bug in this workload
            session_id = successor


def compact_once(
    store: PostgresStore, session_id: str, holder: str, mode: str, ttl_s: float, wait_for_tail: bool
) -> dict[str, Any] | str:
    """One lease-guarded compaction: the record and the snapshot it read, or why not."""
    lease = store.acquire_lease(session_id, holder, ttl_s)
    if lease is None:
        return "lease_held"
    try:
        snapshot = store.transcript(session_id)  # read under the lease
        if len(snapshot) < 2:
            return "nothing_to_do"
        if wait_for_tail:  # a slow summary: let other writers land a tail
            deadline = time.monotonic() + 1.0
            while len(store.transcript(session_id)) == len(snapshot) and time.monotonic() < deadline:
                time.sleep(0.002)
        summary = Message("user", f"[CONTEXT COMPACTION] {holder} read {len(snapshot)}")
        try:
            record = store.commit_compaction(
                lease, watermark=snapshot[-1].seq, compacted=[summary], mode=mode, compressor=holder
            )
        except SessionEndedError:
            return "ended"
        except LeaseLostError:
            return "lease_lost"
        return {"record": record, "snapshot_ids": [m.id for m in snapshot], "session_id": session_id}
    finally:
        store.release_lease(lease)


def racing_worker(url: str, worker_no: int, roots: list[str], iterations: int, barrier: Any, out: Any) -> None:
    """Append to random sessions; now and then compact one (random mode, sometimes a short TTL)."""
    rng = random.Random(worker_no)
    store = PostgresStore(url, max_size=2)
    acked, commits, refusals = [], [], Counter()
    believed = {root: root for root in roots}
    try:
        barrier.wait(30)
        for i in range(iterations):
            root = rng.choice(roots)
            message = Message("user", f"w{worker_no}-{i}")
            sid, stored, t0, t1 = append_following(store, believed[root], message)
            believed[root] = sid
            acked.append((stored.session_id, stored.id, stored.seq, stored.content, t0, t1))
            if rng.random() < 0.25:
                # Half the time compact a stale id (the root): an ended parent must refuse.
                target = sid if rng.random() < 0.5 else root
                ttl = 0.05 if rng.random() < 0.2 else 30.0
                # A short lease with a slow summary may expire mid-way: fenced, or committed in time.
                result = compact_once(store, target, f"w{worker_no}", rng.choice(["in_place", "rotate"]), ttl, ttl < 1)
                if isinstance(result, dict):
                    commits.append(result)
                else:
                    refusals[result] += 1
        out.put({"worker": worker_no, "acked": acked, "commits": commits, "refusals": dict(refusals)})
    except BaseException as exc:  # reported to the parent, which fails the test
        out.put({"worker": worker_no, "error": repr(exc)})
    finally:
        store.close()


def writer(url: str, worker_no: int, root: str, count: int, barrier: Any, out: Any) -> None:
    store = PostgresStore(url, max_size=1)
    acked = []
    try:
        barrier.wait(30)
        sid = root
        for i in range(count):
            message = Message("assistant", f"writer{worker_no}-{i}")
            sid, stored, t0, t1 = append_following(store, sid, message)
            acked.append((stored.session_id, stored.id, stored.seq, stored.content, t0, t1))
        out.put({"worker": worker_no, "acked": acked, "commits": [], "refusals": {}})
    except BaseException as exc:
        out.put({"worker": worker_no, "error": repr(exc)})
    finally:
        store.close()


def compactor(url: str, worker_no: int, root: str, rounds: int, barrier: Any, out: Any) -> None:
    store = PostgresStore(url, max_size=1)
    commits, refusals = [], Counter()
    try:
        barrier.wait(30)
        sid = root
        for i in range(rounds):
            sid = store.resolve(sid)
            mode = "rotate" if i % 2 else "in_place"
            result = compact_once(store, sid, f"compactor{worker_no}", mode, 30.0, True)
            if isinstance(result, dict):
                commits.append(result)
            else:
                refusals[result] += 1
        out.put({"worker": worker_no, "acked": [], "commits": commits, "refusals": dict(refusals)})
    except BaseException as exc:
        out.put({"worker": worker_no, "error": repr(exc)})
    finally:
        store.close()


def crossing_writer(url: str, worker_no: int, ids: list[str], gate_id: str, ready: Any, out: Any) -> None:
    """Queues one append per id behind a held batch (an append to ``gate_id``, held
    at the parent's gate), in the order of ``ids``, so that the writer's next batch
    names the sessions in that order; says so on ``ready``. Reports its
    acknowledgements and the writer's deadlock retries (its log)."""
    import logging
    import threading

    deadlocks: list[str] = []

    class Deadlocks(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "Deadlock" in record.getMessage():
                deadlocks.append(record.getMessage())

    log = logging.getLogger("session_actors.postgres.writer")
    log.setLevel(logging.DEBUG)
    log.addHandler(Deadlocks())
    store = PostgresStore(url, max_size=1)
    acked: list[tuple] = []
    try:

        def append(sid: str) -> None:
            _, stored, t0, t1 = append_following(store, sid, Message("user", f"w{worker_no}"))
            acked.append((stored.session_id, stored.id, stored.seq, stored.content, t0, t1))

        threads = [threading.Thread(target=append, args=(gate_id,))]
        threads[0].start()
        wait_for_writer(store, in_flight=1, queued=0)
        for n, sid in enumerate(ids):
            threads.append(threading.Thread(target=append, args=(sid,)))
            threads[-1].start()
            wait_for_writer(store, in_flight=1, queued=n + 1)
        ready.put(worker_no)
        for t in threads:
            t.join(RESULT_WAIT_S)
        out.put({"worker": worker_no, "acked": acked, "commits": [], "refusals": {}, "deadlocks": deadlocks})
    except BaseException as exc:
        out.put({"worker": worker_no, "error": repr(exc)})
    finally:
        store.close()


def wait_for_writer(store: PostgresStore, *, in_flight: int, queued: int) -> None:
    deadline = time.monotonic() + 20
    while (stats := store.write_stats()).in_flight != in_flight or stats.queued < queued:
        if time.monotonic() > deadline:
            raise AssertionError(f"{stats}: never {in_flight} in flight and {queued} queued")
        time.sleep(0.005)


# ---------------------------------------------------------------- parent side


def run_processes(targets: list[tuple[Any, tuple]]) -> list[dict[str, Any]]:
    """Start one spawned process per (function, args), all released by one barrier."""
    barrier = SPAWN.Barrier(len(targets))
    out = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=fn, args=(*args, barrier, out), name=f"pg-worker-{n}")
        for n, (fn, args) in enumerate(targets)
    ]
    for p in procs:
        p.start()
    results = []
    try:
        for _ in procs:
            results.append(out.get(timeout=RESULT_WAIT_S))
    except queue.Empty:
        pytest.fail(f"workers did not report within {RESULT_WAIT_S}s; got {len(results)}")
    finally:
        stop_all(procs)
        out.close()
        out.join_thread()
    errors = [r for r in results if "error" in r]
    assert not errors, errors
    return results


def stop_all(procs: list[Any]) -> None:
    """Join each worker; kill one still running after 10 s."""
    for p in procs:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join(5)


def check_integrity(url: str, results: list[dict[str, Any]]) -> dict[str, int]:
    """The invariants, checked on the database itself. Returns a few counts."""
    forks = pg_rows(
        url,
        "SELECT parent_session_id, count(*) FROM sessions"
        " WHERE parent_session_id IS NOT NULL GROUP BY 1 HAVING count(*) > 1",
    )
    assert forks == [], f"lineage forked: {forks}"
    gaps = pg_rows(
        url,
        "SELECT session_id, count(*), min(seq), max(seq) FROM messages"
        " GROUP BY 1 HAVING count(*) <> max(seq) OR min(seq) <> 1",
    )
    assert gaps == [], f"seq gaps: {gaps}"
    held = pg_rows(url, "SELECT session_id, holder, token FROM leases WHERE holder IS NOT NULL")
    assert held == [], f"leases left held: {held}"
    rows = {r[0]: r for r in pg_rows(url, "SELECT id, session_id, seq, content, state, origin_id FROM messages")}
    copies: dict[int, list[int]] = {}
    for row in rows.values():
        if row[5] is not None:
            copies.setdefault(row[5], []).append(row[0])
    assert all(len(c) == 1 for c in copies.values()), "a tail row was copied twice"
    for row in rows.values():  # a superseded row lives on in exactly one copy
        if row[4] == "superseded":
            assert row[0] in copies, f"superseded row {row} has no copy"
            assert rows[copies[row[0]][0]][3] == row[3]

    acked = [a for r in results for a in r["acked"]]
    for session_id, msg_id, seq, content, _, _ in acked:
        assert msg_id in rows, f"acknowledged append {content!r} is missing"
        assert rows[msg_id][1:4] == (session_id, seq, f'"{content}"')
        current = msg_id  # follow tail copies to where the message lives now
        while rows[current][4] == "superseded":
            current = copies[current][0]
            assert rows[current][3] == f'"{content}"'
        assert rows[current][4] in ("live", "compacted")

    by_session: dict[str, list[tuple]] = {}
    for a in acked:
        by_session.setdefault(a[0], []).append(a)
    for session_id, appends in by_session.items():  # seqs follow commit order
        for a in appends:
            for b in appends:
                if a[5] < b[4]:
                    assert a[2] < b[2], f"{session_id}: {a} acknowledged before {b} started but got a later seq"

    commits = [c for r in results for c in r["commits"]]
    compacted_by_session: dict[str, set[int]] = {}
    for c in commits:
        record = c["record"]
        assert record.archived_count == len(c["snapshot_ids"]), "archived a message the compactor never read"
        compacted_by_session.setdefault(c["session_id"], set()).update(c["snapshot_ids"])
    for session_id, read_ids in compacted_by_session.items():
        archived = {r[0] for r in rows.values() if r[1] == session_id and r[4] == "compacted"}
        assert archived == read_ids, f"{session_id}: compacted rows differ from what compactors read"
    records = pg_rows(url, "SELECT count(*), count(DISTINCT (session_id, token)) FROM compactions")[0]
    assert records[0] == records[1], "two commits on one lease token"
    if commits:
        assert records[0] == len(commits), "a commit without a record, or a record nobody committed"
    return {"acked": len(acked), "commits": len(commits), "tails": sum(c["record"].tail_count for c in commits)}


def test_processes_race_appends_rotations_and_in_place_compactions(pg_url: str):
    roots = ["alpha", "beta", "gamma"]
    store = PostgresStore(pg_url)
    try:
        for root in roots:
            store.create_session(root, source="test")
    finally:
        store.close()
    results = run_processes([(racing_worker, (pg_url, n, roots, 60)) for n in range(3)])
    counts = check_integrity(pg_url, results)
    assert counts["acked"] == 180
    assert counts["commits"] > 0, "no compaction committed: the race was not exercised"
    refusals = Counter()
    for r in results:
        refusals.update(r["refusals"])
    modes = {row[0] for row in pg_rows(pg_url, "SELECT DISTINCT mode FROM compactions")}
    assert modes == {"in_place", "rotate"}, (modes, refusals)
    for root in roots:  # every lineage resolves to one live tip
        tip = pg_rows(
            pg_url,
            "SELECT count(*) FROM sessions WHERE ended_at IS NULL AND (id = %s OR id LIKE %s)",
            (root, f"{root}~%"),
        )[0][0]
        assert tip == 1


def test_writers_append_while_compactions_commit(pg_url: str):
    store = PostgresStore(pg_url)
    try:
        store.create_session("busy", source="test")
        store.append("busy", [Message("system", "be brief"), Message("user", "hello")])
    finally:
        store.close()
    targets = [(writer, (pg_url, n, "busy", 80)) for n in range(3)]
    targets.append((compactor, (pg_url, 3, "busy", 8)))
    results = run_processes(targets)
    counts = check_integrity(pg_url, results)
    assert counts["acked"] == 240
    assert counts["commits"] >= 4, results[-1]["refusals"]
    assert counts["tails"] > 0, "no append landed during a summary: the tail path was not exercised"


def test_two_processes_batching_the_same_sessions_in_opposite_orders_never_deadlock(pg_url: str):
    """Two processes' writers each send a batch naming the same 16 sessions, one in
    ascending, the other in descending order, while another transaction holds the
    row of one of them. Neither batch waits for that row (it skips it and commits
    the other 15) nor for the other's rows (locked in id order, held only to the
    commit): no deadlock, and the held session's appends land once it is let go."""
    import contextlib

    import psycopg

    from tests.persistence.postgres.test_group_commit import gate
    from tests.pg import with_application_name

    ids = [f"cross-{i:02d}" for i in range(16)]
    with PostgresStore(pg_url) as store:
        for sid in ids + ["gate-0", "gate-1"]:
            store.create_session(sid)
    ready, out = SPAWN.Queue(), SPAWN.Queue()
    orders = {0: ids, 1: ids[::-1]}
    with contextlib.ExitStack() as gates, psycopg.connect(pg_url) as middle:
        gates.enter_context(gate(pg_url))
        middle.execute("SELECT id FROM sessions WHERE id = 'cross-08' FOR UPDATE")
        procs = [
            SPAWN.Process(
                target=crossing_writer,
                name=f"crossing-{n}",
                args=(with_application_name(pg_url, f"crossing-{n}"), n, order, f"gate-{n}", ready, out),
            )
            for n, order in orders.items()
        ]
        for p in procs:
            p.start()
        try:
            assert sorted(ready.get(timeout=RESULT_WAIT_S) for _ in procs) == [0, 1]
            gates.close()  # each writer now sends its batch of 16
            deadline = time.monotonic() + 20
            written = "SELECT count(*) FROM messages WHERE session_id LIKE 'cross-%%'"
            while pg_rows(pg_url, written)[0][0] < 2 * (len(ids) - 1):
                assert time.monotonic() < deadline, "the batches did not commit past the held row"
                time.sleep(0.01)
            held = "SELECT count(*) FROM messages WHERE session_id = 'cross-08'"
            assert pg_rows(pg_url, held) == [(0,)]
            middle.rollback()
            results = [out.get(timeout=RESULT_WAIT_S) for _ in procs]
        finally:
            stop_all(procs)
    assert not [r for r in results if "error" in r], results
    assert [r["deadlocks"] for r in results] == [[], []]
    counts = check_integrity(pg_url, results)
    assert counts["acked"] == 2 * (len(ids) + 1)
