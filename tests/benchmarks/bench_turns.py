"""What a turn costs (prints figures; not collected by pytest).

    python tests/benchmarks/bench_turns.py [--turns 200] [--rounds 7]

One user turn = 4 appends through one handle (ask, tool call, tool result, answer) on
a SQLite file. Compared side by side in one run, alternating which mode goes first
each round, medians over rounds: the 4 appends bare, and the same 4 inside
``with handle.turn():`` (two more mailbox round trips: open and close). A third
figure: the same turns while a review thread appends as fast as it can to the same
session (its appends are held during each turn and applied when it closes).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from contextlib import nullcontext

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from actors import SessionRegistry
from persistence import open_store
from protocol import Message

CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
TURN = [
    Message("user", "what is the weather in Lisbon?"),
    Message("assistant", None, tool_calls=[CALL]),
    Message("tool", "12 C", tool_call_id="c1"),
    Message("assistant", "12 C and sunny"),
]


def run(registry: SessionRegistry, session_id: str, turns: int, *, in_turn: bool, review: bool) -> float:
    """Median microseconds per user turn."""
    handle = registry.session(session_id)
    stop = threading.Event()

    def hammer() -> None:
        note = registry.review(session_id)
        while not stop.is_set():
            note.append("assistant", "review note")

    thread = threading.Thread(target=hammer) if review else None
    if thread is not None:
        thread.start()
    timings = []
    try:
        for _ in range(turns):
            started = time.perf_counter()
            with handle.turn() if in_turn else nullcontext():
                for message in TURN:
                    handle.append(message)
            timings.append(time.perf_counter() - started)
    finally:
        stop.set()
        if thread is not None:
            thread.join()
    return statistics.median(timings) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    modes = {
        "bare": dict(in_turn=False, review=False),
        "turn": dict(in_turn=True, review=False),
        "turn+review": dict(in_turn=True, review=True),
    }
    figures: dict[str, list[float]] = {mode: [] for mode in modes}
    with (
        tempfile.TemporaryDirectory() as tmp,
        open_store(os.path.join(tmp, "bench.db")) as store,
        SessionRegistry(store) as registry,
    ):
        order = list(modes)
        for round_ in range(args.rounds + 1):  # round 0 warms up, unrecorded
            for mode in order:
                value = run(registry, f"{mode}-{round_}", args.turns, **modes[mode])
                if round_:
                    figures[mode].append(value)
            order = order[1:] + order[:1]
    bare = statistics.median(figures["bare"])
    for mode, values in figures.items():
        median = statistics.median(values)
        print(
            f"{mode:<12} median {median:8.0f} us per 4-append user turn "
            f"({median / bare:4.2f}x bare; rounds {min(values):.0f}-{max(values):.0f})"
        )


if __name__ == "__main__":
    main()
