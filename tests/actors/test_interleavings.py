"""Seeded random interleavings: two registries ("processes"), several threads each,
appends, compresses (both modes, forced or not), interrupts and reviews racing on
two roots. Afterwards: no fork, nothing acknowledged is missing, no lease held,
each lineage ends in one live tip."""

from __future__ import annotations

import random
import threading

import pytest

from actors.testing import summary_only
from protocol import CompressionStatus, TranscriptError

pytestmark = pytest.mark.timeout(90)

ROOTS = ["root-a", "root-b"]
THREADS_PER_REGISTRY = 3
OPS_PER_THREAD = 120


class SlowSummary:
    """A stateless compressor that takes a little while and honours cancel."""

    name = "slow-summary"

    def compress(self, messages, *, target_tokens, cancel):
        if cancel.wait(0.005):
            raise RuntimeError("cancelled")
        return summary_only(messages)


@pytest.mark.parametrize("seed", [1, 2])
def test_random_interleavings_keep_every_invariant(make_registry, store, seed):
    registries = [make_registry(SlowSummary(), cooldown_s=0.0, keep_last=2) for _ in range(2)]
    acked: list[tuple[str, int]] = []
    outcomes: list[CompressionStatus] = []
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(2 * THREADS_PER_REGISTRY)

    def worker(registry, worker_no: int) -> None:
        rng = random.Random(seed * 100 + worker_no)
        handles = {root: registry.session(root, source="test") for root in ROOTS}
        reviews = {root: registry.review(root) for root in ROOTS}
        try:
            barrier.wait(10)
            for i in range(OPS_PER_THREAD):
                root = rng.choice(ROOTS)
                op = rng.random()
                if op < 0.6:
                    target = reviews[root] if rng.random() < 0.2 else handles[root]
                    role = "user" if i % 2 == 0 else "assistant"
                    stored = target.append(role, f"w{worker_no}-{i}")
                    with lock:
                        acked.append((stored.session_id, stored.id))
                elif op < 0.9:
                    outcome = handles[root].compress(force=rng.random() < 0.3, mode=rng.choice(["in_place", "rotate"]))
                    with lock:
                        outcomes.append(outcome.status)
                else:
                    handles[root].interrupt()
        except TranscriptError as exc:  # any library error is a failure of this test
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(registries[n % 2], n)) for n in range(2 * THREADS_PER_REGISTRY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors
    committed = [s for s in outcomes if s.committed]
    assert committed, f"nothing committed: {outcomes}"

    for registry in registries:
        registry.close()
    assert store.leases() == []
    sessions = store.sessions()
    for info in sessions:
        assert len(store.children(info.id)) <= 1, f"fork under {info.id}"
    rows = [m for info in sessions for m in store.transcript(info.id) + store.archive(info.id)]
    kept = {(m.session_id, m.id) for m in rows}
    missing = [a for a in acked if a not in kept]
    assert not missing, f"acknowledged messages missing: {missing[:5]}"
    # a tail message (appended during a summary) is always carried into the result
    carried = {m.origin_id for m in rows if m.origin_id is not None}
    dropped = [m.id for m in rows if m.state == "superseded" and m.id not in carried]
    assert not dropped, f"superseded rows never carried over: {dropped[:5]}"
    # nothing is left live in an ended session (no orphan writes)
    for info in sessions:
        if info.ended_at is not None:
            assert store.transcript(info.id) == [], f"live rows in ended {info.id}"
    for root in ROOTS:
        tip = store.resolve(root)
        assert store.get_session(tip).ended_at is None
