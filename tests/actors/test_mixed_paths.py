"""Seeded random mixes of every way into an actor, on one registry: appends from
threads (the caller-runs path or the mailbox), ``append_async`` from tasks of one
event loop, turns of both kinds, compactions in both modes, and actors evicted and
started again all the while (a tiny ``max_resident`` and idle timeout).

Afterwards, read from the database: every acknowledged message is still there
(live, or carried into a compaction's result, or compacted into a summary), none is
live twice, each caller's messages that are still live are in the order it sent
them, and a turn's messages that are still live are contiguous.
"""

from __future__ import annotations

import asyncio
import random
import threading
from dataclasses import dataclass

import pytest

from actors.testing import summary_only
from protocol import Message, StoredMessage, TranscriptError

pytestmark = pytest.mark.timeout(120)

ROOTS = [f"mix-{n}" for n in range(12)]
THREADS = 3
TASKS = 6
OPS = 60


class QuickSummary:
    """Stateless; takes a moment and honours cancel (so appends land in the tail)."""

    name = "quick-summary"

    def compress(self, messages, *, target_tokens, cancel):
        if cancel.wait(0.003):
            raise RuntimeError("cancelled")
        return summary_only(messages)


@dataclass
class Ledger:
    """What callers were told: acknowledged messages in each caller's order, and turns."""

    acked: dict[str, list[StoredMessage]]  # caller -> its acks, in order
    turns: list[list[StoredMessage]]
    errors: list[BaseException]
    lock: threading.Lock

    def ack(self, caller: str, stored: list[StoredMessage], *, turn: bool = False) -> None:
        with self.lock:
            self.acked.setdefault(caller, []).extend(stored)
            if turn:
                self.turns.append(list(stored))


def _sync_worker(registry, ledger: Ledger, no: int, seed: int, start: threading.Barrier) -> None:
    rng = random.Random(seed * 1000 + no)
    caller = f"thread-{no}"
    try:
        start.wait(10)
        for i in range(OPS):
            handle = registry.session(rng.choice(ROOTS), source="test")
            op = rng.random()
            if op < 0.65:
                ledger.ack(caller, [handle.append("user", f"{caller}-{i}")])
            elif op < 0.85:
                with handle.turn():
                    got = [
                        handle.append("user", f"{caller}-{i}-ask"),
                        handle.append("assistant", f"{caller}-{i}-answer"),
                    ]
                ledger.ack(caller, got, turn=True)
            else:
                handle.compress(force=True, mode=rng.choice(["in_place", "rotate"]))
    except TranscriptError as exc:
        ledger.errors.append(exc)


async def _async_worker(registry, ledger: Ledger, no: int, seed: int) -> None:
    rng = random.Random(seed * 1000 + 500 + no)
    caller = f"task-{no}"
    try:
        for i in range(OPS):
            handle = await registry.session_async(rng.choice(ROOTS), source="test")
            if rng.random() < 0.75:
                ledger.ack(caller, [await handle.append_async(Message("user", f"{caller}-{i}"))])
            else:
                async with handle.turn():
                    got = [
                        await handle.append_async("user", f"{caller}-{i}-ask"),
                        await handle.append_async("assistant", f"{caller}-{i}-answer"),
                    ]
                ledger.ack(caller, got, turn=True)
    except TranscriptError as exc:
        ledger.errors.append(exc)


def _run_loop(registry, ledger: Ledger, seed: int, start: threading.Barrier) -> None:
    async def main() -> None:
        await asyncio.gather(*(_async_worker(registry, ledger, n, seed) for n in range(TASKS)))

    start.wait(10)
    asyncio.run(main())


def _fates(store) -> tuple[dict[int, StoredMessage], dict[int, list[StoredMessage]]]:
    """Every row of every session by id, and the copies made of each (by origin)."""
    rows: dict[int, StoredMessage] = {}
    for info in store.sessions():
        for m in store.transcript(info.id) + store.archive(info.id):
            rows[m.id] = m
    copies: dict[int, list[StoredMessage]] = {}
    for m in rows.values():
        if m.origin_id is not None:
            copies.setdefault(m.origin_id, []).append(m)
    return rows, copies


def _live_forms(row: StoredMessage, copies: dict[int, list[StoredMessage]]) -> list[StoredMessage]:
    """The live rows standing for ``row`` now: itself, or the copies carried forward."""
    if row.state == "live":
        return [row]
    return [live for copy in copies.get(row.id, []) for live in _live_forms(copy, copies)]


@pytest.mark.parametrize("seed", [1, 2])
def test_every_path_into_an_actor_keeps_order_turns_and_every_message(make_registry, store, seed):
    registry = make_registry(QuickSummary(), cooldown_s=0.0, keep_last=2, max_resident=2, idle_timeout_s=0.05)
    ledger = Ledger({}, [], [], threading.Lock())
    start = threading.Barrier(THREADS + 1)
    threads = [threading.Thread(target=_sync_worker, args=(registry, ledger, n, seed, start)) for n in range(THREADS)]
    threads.append(threading.Thread(target=_run_loop, args=(registry, ledger, seed, start)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads)
    assert not ledger.errors, ledger.errors
    assert registry.stats()["actors_stopped"] > 0, "no eviction happened: the mix is too tame"
    registry.close()

    assert store.leases() == []
    for info in store.sessions():
        assert len(store.children(info.id)) <= 1, f"fork under {info.id}"
    rows, copies = _fates(store)
    live_seen: dict[int, int] = {}
    for caller, acks in ledger.acked.items():
        last_seq: dict[str, int] = {}
        for ack in acks:
            row = rows.get(ack.id)
            assert row is not None and row.content == ack.content, f"{caller}: {ack} is gone"
            forms = _live_forms(row, copies)
            assert len(forms) <= 1, f"{caller}: {ack.content!r} is live {len(forms)} times"
            if not forms:  # compacted into a summary (or superseded with a compacted copy)
                continue
            live = forms[0]
            live_seen[live.id] = live_seen.get(live.id, 0) + 1
            previous = last_seq.get(live.session_id, 0)
            assert live.seq > previous, f"{caller}: {ack.content!r} overtook an earlier message"
            last_seq[live.session_id] = live.seq
    assert all(n == 1 for n in live_seen.values()), "one live row stands for two acknowledgements"
    for turn in ledger.turns:
        forms = [_live_forms(rows[m.id], copies) for m in turn]
        if all(forms):
            seqs = [f[0].seq for f in forms]
            assert len({f[0].session_id for f in forms}) == 1
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), f"turn split: {turn}"
    compacted = [m for m in rows.values() if m.state == "compacted"]
    assert compacted, "no compaction committed: the mix is too tame"
