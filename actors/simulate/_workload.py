"""The gateway-shaped workload ``simulate`` drives, and one worker (a process's share).

A worker runs the turns of the sessions routed to it (`owned_roots`) on ``threads``
threads. Each turn of a session is the user's message and the assistant's reply
(sometimes with a tool call and its result between), appended inside one
``turn()``, plus, at random (seeded): a background review appending through
`SessionRegistry.review` at the same time, a "background process finished" event,
a manual ``/compress`` (either mode; with several workers it may reach a session
another worker owns), the incident itself (two paths compressing the same session
at the same moment, started by one barrier), and an interrupt racing a compression.
Auto-compaction runs under a policy with a low ``max_tokens``. The same turn script
drives the naive gateway (`actors.simulate._gateways`), which has no turns.

Every message carries ``meta["turn"]`` (unique per execution of a turn, so a turn
re-run after a kill is another turn) so the check can find turns in the database.
"""

from __future__ import annotations

import json
import logging
import random
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, fields
from typing import Protocol

from protocol import Message, StoredMessage, TurnLostError

from ._check import Ack
from ._config import STEP_TIMEOUT_S, WorkerConfig, owned_roots, owns, owns_turn, session_ids

__all__ = ["Gateway", "WorkerResult", "build_jobs", "run_worker"]

log = logging.getLogger("session_actors.simulate.workload")

#: Chances per turn of each extra event.
P_REVIEW, P_TOOL, P_BACKGROUND, P_COMPRESS, P_RACE, P_INTERRUPT = 0.25, 0.2, 0.12, 0.06, 0.06, 0.05
#: Unrouted: the chance that an append of the user's ask is retried (its answer lost).
P_RETRY = 0.15
#: Errors listed verbatim in the report.
_MAX_ERROR_EXAMPLES = 5


@dataclass(slots=True)
class WorkerResult:
    acks: list[Ack] = field(default_factory=list)
    turns: int = 0
    appended: int = 0
    outcomes: Counter = field(default_factory=Counter)
    interrupts: int = 0
    interrupts_won: int = 0
    turns_lost: int = 0  # refused part-way: the worker was frozen past its turn lease
    errors: Counter = field(default_factory=Counter)
    error_examples: list[str] = field(default_factory=list)

    def merge(self, other: WorkerResult) -> None:
        self.acks += other.acks
        self.turns += other.turns
        self.appended += other.appended
        self.outcomes.update(other.outcomes)
        self.interrupts += other.interrupts
        self.interrupts_won += other.interrupts_won
        self.turns_lost += other.turns_lost
        self.errors.update(other.errors)
        room = _MAX_ERROR_EXAMPLES - len(self.error_examples)
        self.error_examples += other.error_examples[: max(0, room)]

    def record_error(self, where: str, exc: BaseException) -> None:
        self.errors[type(exc).__name__] += 1
        if len(self.error_examples) < _MAX_ERROR_EXAMPLES:
            self.error_examples.append(f"{where}: {type(exc).__name__}: {exc}")

    def to_json(self) -> str:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["acks"] = [[a.root, a.id, a.content] for a in self.acks]
        data["outcomes"], data["errors"] = dict(self.outcomes), dict(self.errors)
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> WorkerResult:
        data = json.loads(text)
        data["acks"] = [Ack(*a) for a in data["acks"]]
        data["outcomes"] = Counter(data["outcomes"])
        data["errors"] = Counter(data["errors"])
        return cls(**data)


class Gateway(Protocol):
    """What a turn needs from the layer under test (actors, or naive store calls)."""

    def append(self, root: str, messages: Sequence[Message], *, review: bool = False) -> list[StoredMessage]: ...
    def turn(self, root: str) -> AbstractContextManager[object]:
        """Main-path appends of this thread to ``root`` inside the block form one turn."""
        ...

    def compress(self, root: str, mode: str) -> str: ...
    def compress_and_interrupt(self, root: str, mode: str) -> tuple[str, bool]: ...
    def after_turn(self, root: str) -> None: ...


def build_jobs(config: WorkerConfig) -> list[tuple[str, int]]:
    """This worker's (session, turn) pairs: every turn of the sessions routed to it,
    round by round so they advance together; shuffled inside a round."""
    rng = random.Random(f"{config.seed}:{config.worker}:jobs")
    roots = owned_roots(config)
    jobs = []
    for turn in range(config.turns):
        round_jobs = [(root, turn) for root in roots if owns_turn(config, root, turn)]
        rng.shuffle(round_jobs)
        jobs += round_jobs
    return jobs


def run_worker(
    config: WorkerConfig,
    gateway: Gateway,
    progress: Callable[[int], None],
    *,
    jobs: Iterable[tuple[str, int]] | None = None,
) -> WorkerResult:
    """Run this worker's jobs on ``config.threads`` threads; every thread is joined.

    ``jobs`` replaces `build_jobs` (``--chaos``: what a restarted worker has left,
    then more turns until the run is told to stop); it is consumed under a lock.
    """
    pending = iter(build_jobs(config) if jobs is None else jobs)
    lock = threading.Lock()
    stopped = False
    results = [WorkerResult() for _ in range(config.threads)]

    def next_job() -> tuple[str, int] | None:
        with lock:
            return None if stopped else next(pending, None)

    def loop(index: int) -> None:
        while (job := next_job()) is not None:
            root, turn = job
            # seeded per turn, not per thread: a seed replays the same events
            # whichever thread happens to pick each turn up
            rng = random.Random(f"{config.seed}:{root.removeprefix(config.prefix)}:{turn}")
            _run_turn(gateway, root, turn, config, rng, results[index])
            progress(1)

    threads = [threading.Thread(target=loop, args=(i,), name=f"sim-worker-{i}") for i in range(config.threads)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: let every thread finish its current turn, then stop
        with lock:
            stopped = True
        for t in threads:
            t.join()
        raise
    total = WorkerResult()
    for r in results:
        total.merge(r)
    return total


def _run_turn(
    gateway: Gateway, root: str, turn: int, config: WorkerConfig, rng: random.Random, result: WorkerResult
) -> None:
    tag = f"{root} w{config.worker} t{turn}"
    if not owns(config, root):  # another worker's session: this process only compacts it
        try:
            _maybe_compress(gateway, root, rng, result)
        except Exception as exc:
            result.record_error(f"visit {tag}", exc)
        return
    try:
        asked = threading.Event()  # the review reacts to the ask, in the middle of the turn
        review = _maybe_start_review(gateway, root, tag, rng, asked)
        try:
            with gateway.turn(root):
                _user_turn(gateway, root, tag, turn, rng, result, asked, config.unrouted)
        finally:
            asked.set()  # never leave the review waiting
        if review is not None:
            thread, review_result = review
            thread.join(STEP_TIMEOUT_S)
            result.merge(review_result)
        if rng.random() < P_BACKGROUND:
            event = Message("user", f"Background process proc_{turn} completed ({tag})", meta={"synthetic": True})
            _append(gateway, root, [event, Message("assistant", f"noted {tag}")], result)
        _maybe_compress(gateway, _compress_target(root, config, rng), rng, result)
        gateway.after_turn(root)
        result.turns += 1
    except TurnLostError:  # frozen past its lease (--chaos): the rest of the turn was refused
        result.turns_lost += 1
    except Exception as exc:  # counted as a violation in the report, never lost
        result.record_error(f"turn {tag}", exc)


def _user_turn(
    gateway: Gateway,
    root: str,
    tag: str,
    turn: int,
    rng: random.Random,
    result: WorkerResult,
    asked: threading.Event,
    retries: bool = False,
) -> None:
    """The ask, maybe a tool call and its result, the reply: one append each. The ask
    carries an idempotency key; with ``retries`` it is sometimes sent twice (the
    first acknowledgement lost), and only the second answer is acknowledged.

    ``asked`` is set after the ask, or after the tool call when there is one: a
    review racing the turn lands inside it (or between the call and its result)
    unless the turn holds it.
    """
    meta = {"turn": f"{tag} {uuid.uuid4().hex[:8]}"}
    ask = Message("user", f"user ask {tag}: {_words(rng)}", meta=meta, key=f"ask {meta['turn']}")
    if retries and rng.random() < P_RETRY:  # its answer was lost: sent again, kept once
        gateway.append(root, [ask])
    _append(gateway, root, [ask], result)
    if rng.random() < P_TOOL:
        call_id = f"call-{turn}"
        call = {"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
        _append(gateway, root, [Message("assistant", None, tool_calls=[call], meta=meta)], result)
        asked.set()
        _append(gateway, root, [Message("tool", f"tool result {tag}", tool_call_id=call_id, meta=meta)], result)
    asked.set()
    _append(gateway, root, [Message("assistant", f"reply {tag}: {_words(rng)}", meta=meta)], result)


def _compress_target(root: str, config: WorkerConfig, rng: random.Random) -> str:
    """Usually the turn's own session; with several workers, sometimes one another worker
    owns (a manual ``/compress`` reaching any process: leases and fencing at work)."""
    roll = rng.random()  # drawn in every run, so a seed replays the same events
    if config.workers > 1 and roll < 0.5:
        return rng.choice(session_ids(config.prefix, config.sessions))
    return root


def _append(
    gateway: Gateway, root: str, messages: list[Message], result: WorkerResult, *, review: bool = False
) -> None:
    stored = gateway.append(root, messages, review=review)
    result.appended += len(stored)
    result.acks += [Ack(root, m.id, m.text) for m in stored]


def _maybe_start_review(
    gateway: Gateway, root: str, tag: str, rng: random.Random, asked: threading.Event
) -> tuple[threading.Thread, WorkerResult] | None:
    """The background review shares the session id and writes, once the user has asked,
    while the turn goes on."""
    if rng.random() >= P_REVIEW:
        return None
    note = Message("assistant", f"review note {tag}: {_words(rng)}", meta={"review": True})
    local = WorkerResult()

    def review() -> None:
        try:
            asked.wait(STEP_TIMEOUT_S)
            _append(gateway, root, [note], local, review=True)
        except Exception as exc:  # merged into the turn's result after the join
            local.record_error(f"review {tag}", exc)

    thread = threading.Thread(target=review, name="sim-review")
    thread.start()
    return thread, local


def _maybe_compress(gateway: Gateway, root: str, rng: random.Random, result: WorkerResult) -> None:
    roll = rng.random()
    mode = rng.choice(("in_place", "rotate"))
    if roll < P_COMPRESS:
        result.outcomes[gateway.compress(root, mode)] += 1
    elif roll < P_COMPRESS + P_RACE:
        for status in _race(gateway, root, mode):
            result.outcomes[status] += 1
    elif roll < P_COMPRESS + P_RACE + P_INTERRUPT:
        status, won = gateway.compress_and_interrupt(root, mode)
        result.outcomes[status] += 1
        result.interrupts += 1
        result.interrupts_won += int(won)


def _race(gateway: Gateway, root: str, mode: str) -> list[str]:
    """The incident: two paths compress the same session at the same moment."""
    barrier = threading.Barrier(2, timeout=STEP_TIMEOUT_S)
    statuses: list[str] = []
    errors: list[BaseException] = []

    def path() -> None:
        try:
            barrier.wait()
            statuses.append(gateway.compress(root, mode))
        except Exception as exc:  # re-raised on the turn's thread below
            errors.append(exc)

    other = threading.Thread(target=path, name="sim-race")
    other.start()
    path()
    other.join(STEP_TIMEOUT_S)
    if errors:
        raise errors[0]
    return statuses


_VOCABULARY = (
    "deploy",
    "invoice",
    "lisbon",
    "retry",
    "schema",
    "cache",
    "ticket",
    "refund",
    "latency",
    "budget",
    "weekend",
    "printer",
    "invoice",
    "migration",
    "backup",
)


def _words(rng: random.Random) -> str:
    return " ".join(rng.choice(_VOCABULARY) for _ in range(rng.randint(8, 30)))
