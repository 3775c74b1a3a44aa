"""The peers' workload, one role per process: ``python -m tests.benchmarks.peers.workload ROLE ...``.

Roles (each prints JSON lines on stdout; the orchestrator is ``bench_peers``):

- ``setup SYSTEM DB SESSIONS``: create the store and the sessions;
- ``work SYSTEM DB PLAN WORKER LEDGER``: print ``ready``, wait for a line on stdin, then run
  this worker's share of the plan: per event a turn of four durable writes (user ask, assistant
  tool call, tool result, assistant answer), then a background review thread writes one note
  to the same session while the worker goes on. Every acknowledged write is a ledger line
  (line-buffered: it survives kill -9). Prints {"start", "end", "acked", "errors", "failed"};
- ``check SYSTEM DB PLAN LEDGER...``: read every session through the system's own API and
  count lost, duplicated, split and forked against the ledgers;
- ``hold SYSTEM DB SESSION``: open a turn, acknowledge its first write, print ``holding`` and
  wait to be killed; ``wait SYSTEM DB SESSION``: print ``ready``, and on a line on stdin run a
  turn on that session: prints how long until its first write was acknowledged;
- ``versions SYSTEM``: the versions of the system's distributions.

Every message carries a tag ``ask-N:STEP`` (in its text, tool arguments or tool output), so a
checker finds it in whatever shape the system stores.
"""

from __future__ import annotations

import contextlib
import cProfile
import json
import os
import pstats
import queue
import random
import re
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from importlib import metadata
from typing import Any

STEPS = ("ask", "call", "result", "answer")
TAG = re.compile(r"ask-(\d+):(ask|call|result|answer|note)")


def make_plan(workers: int, sessions: int, asks: int, seed: int, redeliver: float = 0.1) -> dict[str, Any]:
    """``workers`` x ``asks`` user asks, each on a random session; about ``redeliver`` of them
    delivered again 1-3 events later with the same message id, dealt round-robin so that a
    redelivery usually lands on another worker."""
    rng = random.Random(seed)
    ids = [f"s{k:02d}" for k in range(sessions)]
    events: list[dict[str, Any]] = [{"ask": n, "session": rng.choice(ids)} for n in range(workers * asks)]
    for n in range(len(events) - 1, -1, -1):
        if rng.random() < redeliver:
            events.insert(min(n + rng.randint(1, 3), len(events)), dict(events[n]))
    return {"sessions": ids, "workers": [events[w::workers] for w in range(workers)]}


def tags(ask: int) -> list[str]:
    return [f"ask-{ask}:{step}" for step in STEPS]


class Ledger:
    """One line per acknowledged write: ``SESSION TAG``."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", buffering=1)  # open for the worker's life
        self._lock = threading.Lock()
        self.count = 0

    def ack(self, session: str, tag: str) -> None:
        with self._lock:
            self._file.write(f"{session} {tag}\n")
            self.count += 1


COMPACTION = "SESSION_ACTORS_PEERS_COMPACTION"  # set (to 1): the systems compact (`compaction`)


def _system(name: str, db: str) -> Any:
    if os.environ.get(COMPACTION):
        from tests.benchmarks.peers.compaction import ROWS

        return ROWS[name](db)
    from tests.benchmarks.peers.systems import SYSTEMS

    return SYSTEMS[name](db)


@contextlib.contextmanager
def profiled(path: str | None) -> Iterator[None]:
    """With a path: a cProfile of every thread started meanwhile (actors, writers, the review)
    and of this one, merged into one stats file at ``path``."""
    if path is None:
        yield
        return
    profiles, lock, original = [cProfile.Profile()], threading.Lock(), threading.Thread.run

    def run(thread: threading.Thread) -> None:
        profile = cProfile.Profile()
        with lock:
            profiles.append(profile)
        profile.runcall(original, thread)

    threading.Thread.run = run  # type: ignore[method-assign]
    profiles[0].enable()
    try:
        yield
    finally:
        profiles[0].disable()
        threading.Thread.run = original  # type: ignore[method-assign]
        with lock:
            stats = pstats.Stats(profiles[0])
            for profile in profiles[1:]:
                stats.add(profile)
        stats.dump_stats(path)


def work(name: str, db: str, plan_path: str, worker: int, ledger_path: str) -> dict[str, Any]:
    profile = os.environ.get("SESSION_ACTORS_PEERS_PROFILE")
    with profiled(f"{profile}/worker-{worker}.prof" if profile else None):
        return _work(name, db, plan_path, worker, ledger_path)


def _work(name: str, db: str, plan_path: str, worker: int, ledger_path: str) -> dict[str, Any]:
    with open(plan_path) as f:
        events = json.load(f)["workers"][worker]
    system, ledger = _system(name, db), Ledger(ledger_path)
    notes: queue.Queue[tuple[str, str] | None] = queue.Queue()
    failures = {"errors": 0, "failed": 0}

    def review() -> None:  # the background review: one note per turn, off the worker's path
        while (item := notes.get()) is not None:
            session, tag = item
            try:
                system.note(session, tag, lambda t, s=session: ledger.ack(s, t))
            except Exception:
                failures["errors"] += 1

    reviewer = threading.Thread(target=review, name="review")
    reviewer.start()
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.time()
    for event in events:
        session, ask = event["session"], event["ask"]
        try:
            ran = system.turn(session, ask, tags(ask), lambda t, s=session: ledger.ack(s, t))
        except Exception as exc:  # a turn that failed to the caller: counted, the worker goes on
            failures["errors"] += 1
            failures["failed"] += 1
            print(f"turn ask-{ask} failed: {exc!r}", file=sys.stderr)
            continue
        if ran:
            notes.put((session, f"ask-{ask}:note"))
    notes.put(None)
    reviewer.join()
    end = time.time()
    system.close()
    errors = failures["errors"] + getattr(system, "errors", 0)
    compactions = getattr(system, "compactions", 0)
    return {
        "start": start,
        "end": end,
        "acked": ledger.count,
        "errors": errors,
        "failed": failures["failed"],
        "compactions": compactions,
    }


def counts(conversations: dict[str, list[str]], acked: Iterable[tuple[str, str]]) -> dict[str, int]:
    """lost / duplicated / split from each session's live conversation (one serialized
    message per entry) and the acknowledged (session, tag) pairs."""
    live: set[tuple[str, str]] = set()
    lost = duplicated = split = 0
    for session, messages in conversations.items():
        positions: dict[int, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
        for at, text in enumerate(messages):
            for ask, step in {m.groups() for m in TAG.finditer(text)}:
                live.add((session, f"ask-{ask}:{step}"))
                positions[int(ask)][step].append(at)
        for steps in positions.values():
            duplicated += max(0, len(steps["ask"]) - 1)
            for copy in range(max(len(steps[s]) for s in STEPS)):
                at = [steps[s][copy] for s in STEPS if copy < len(steps[s])]
                if len(at) == len(STEPS) and at != list(range(at[0], at[0] + len(STEPS))):
                    split += 1
    lost = len(set(acked) - live)
    return {"lost": lost, "duplicated": duplicated, "split": split}


def erased(live: dict[str, list[str]], kept: dict[str, list[str]], acked: Iterable[tuple[str, str]]) -> int:
    """Acknowledged messages in neither the live conversation (summaries included) nor what
    the system keeps beside it (``kept``: an archive, inactive rows)."""
    return counts({s: live[s] + kept.get(s, []) for s in live}, acked)["lost"]


def check(name: str, db: str, plan_path: str, ledgers: list[str]) -> dict[str, int]:
    with open(plan_path) as f:
        sessions = json.load(f)["sessions"]
    acked: list[tuple[str, str]] = []
    for path in ledgers:
        with open(path) as f:
            acked += [tuple(line.split()) for line in f if line.strip()]  # type: ignore[misc]
    system = _system(name, db)
    try:
        live = {s: system.read(s) for s in sessions}
        result = counts(live, acked)
        result["forks"] = system.forks(sessions)
        if os.environ.get(COMPACTION):  # what compaction lost, and what of it the system kept nowhere
            result["erased"] = erased(live, {s: system.kept(s) for s in sessions}, acked)
    finally:
        system.close()
    return result


def hold(name: str, db: str, session: str) -> None:
    """Open a turn, acknowledge its first write, then wait to be killed mid-turn."""
    system = _system(name, db)

    def ack(tag: str) -> None:
        print("holding", flush=True)
        time.sleep(3600)

    system.turn(session, 0, tags(0), ack)


def wait(name: str, db: str, session: str) -> dict[str, float]:
    """On a line on stdin, a turn on ``session``: seconds until its first write is acknowledged."""
    system = _system(name, db)
    first: list[float] = []
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.monotonic()
    system.turn(session, 1, tags(1), lambda tag: first.append(time.monotonic()) if not first else None)
    system.close()
    return {"stall": first[0] - began}


def versions(name: str) -> dict[str, str]:
    from tests.benchmarks.peers.systems import SYSTEMS

    found = {}
    for dist in SYSTEMS[name].distributions:
        try:
            found[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            found[dist] = "this tree"
    return found


ROLES: dict[str, Callable[..., Any]] = {
    "setup": lambda name, db, n: _system(name, db).setup_and_close([f"s{k:02d}" for k in range(int(n))]),
    "work": lambda name, db, plan, worker, ledger: work(name, db, plan, int(worker), ledger),
    "check": lambda name, db, plan, *ledgers: check(name, db, plan, list(ledgers)),
    "hold": hold,
    "wait": wait,
    "versions": versions,
}


def main(argv: list[str]) -> None:
    result = ROLES[argv[0]](*argv[1:])
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
