"""Contract: random appends and compactions agree with a simple in-memory model.

The model keeps, per lineage, the live ``(seq, message)`` list and every
acknowledged message. After each step the store's live transcript must equal
the model's, seqs over all states must be gapless, and every acknowledged
message must still exist (live or archived).
"""

from __future__ import annotations

import random

import pytest

from protocol import Message, transcripts_equal

STEPS = 40


class Model:
    def __init__(self, session_id: str) -> None:
        self.tip = session_id
        self.live: list[tuple[int, Message]] = []
        self.max_seq = 0
        self.acked_ids: list[int] = []

    def appended(self, stored) -> None:
        for m in stored:
            assert m.seq == self.max_seq + 1
            self.max_seq = m.seq
            self.live.append((m.seq, m.as_message()))
            self.acked_ids.append(m.id)

    def compacted(self, watermark: int, summary: list[Message], mode: str, child: str | None) -> None:
        tail = [msg for seq, msg in self.live if seq > watermark]
        rows = [*summary, *tail]
        start = 1 if mode == "rotate" else self.max_seq + 1
        self.live = [(start + i, msg) for i, msg in enumerate(rows)]
        self.max_seq = start + len(rows) - 1
        if mode == "rotate":
            self.tip = child


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.timeout(90)
def test_random_appends_and_compactions_match_model(store, seed):
    rng = random.Random(seed)
    store.create_session("m")
    model = Model("m")
    lineage = ["m"]
    for step in range(STEPS):
        if rng.random() < 0.7 or len(model.live) < 2:
            batch = [Message(rng.choice(["user", "assistant"]), f"s{step}-{k}") for k in range(rng.randint(1, 3))]
            model.appended(store.append(model.tip, batch))
        else:
            lease = store.acquire_lease(model.tip, "model", 30)
            watermark = rng.choice([seq for seq, _ in model.live])
            mode = rng.choice(["in_place", "rotate"])
            summary = [Message("user", f"[CONTEXT COMPACTION] step {step}")]
            if rng.random() < 0.5:  # a tail that arrives while "summarizing"
                model.appended(store.append(model.tip, Message("assistant", f"tail {step}")))
            record = store.commit_compaction(lease, watermark=watermark, compacted=summary, mode=mode)
            store.release_lease(lease)
            model.compacted(watermark, summary, mode, record.child_session_id)
            if mode == "rotate":
                lineage.append(record.child_session_id)
        live = store.transcript(model.tip)
        assert transcripts_equal(live, [m for _, m in model.live]), f"step {step}"
        assert [m.seq for m in live] == [seq for seq, _ in model.live]
        assert store.resolve("m") == model.tip
    every = {m.id for sid in lineage for m in store.transcript(sid) + store.archive(sid)}
    assert set(model.acked_ids) <= every
    for sid in lineage:
        seqs = sorted(m.seq for m in store.transcript(sid) + store.archive(sid))
        assert seqs == list(range(1, len(seqs) + 1)), sid
