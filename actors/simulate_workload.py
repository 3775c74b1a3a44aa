"""The gateway-shaped workload ``simulate`` drives, and one worker (a process's share).

A worker runs its turns on ``threads`` threads. Each turn of a session is the user's
message and the assistant's reply, plus, at random (seeded): a background review
appending through `SessionRegistry.review` at the same time, a "background process
finished" event, a manual ``/compress`` (either mode), the incident itself (two paths
compressing the same session at the same moment, started by one barrier), and an
interrupt racing a compression. Auto-compaction runs under a policy with a low
``max_tokens``. The same turn script drives the naive gateway (`simulate_gateways`).
"""

from __future__ import annotations

import json
import logging
import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from protocol import Message, StoredMessage

from .compressors import Compressor, HeadTailCompressor
from .policy import CompactionPolicy
from .simulate_check import Ack

__all__ = [
    "Gateway",
    "SlowCompressor",
    "WorkerConfig",
    "WorkerResult",
    "build_jobs",
    "make_policy",
    "process_main",
    "run_worker",
    "session_ids",
]

log = logging.getLogger("session_actors.simulate_workload")

#: Chances per turn of each extra event.
P_REVIEW, P_TOOL, P_BACKGROUND, P_COMPRESS, P_RACE, P_INTERRUPT = 0.25, 0.2, 0.12, 0.06, 0.06, 0.05
#: How long one step waits on a barrier or a helper thread before calling it an error.
STEP_TIMEOUT_S = 60.0
#: Errors listed verbatim in the report.
_MAX_ERROR_EXAMPLES = 5


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """Everything one worker needs; plain values so it pickles into a spawned process."""

    db: str
    prefix: str
    sessions: int
    turns: int
    threads: int
    seed: int
    worker: int = 0
    workers: int = 1
    naive: bool = False
    max_tokens: int = 700
    target_tokens: int = 250
    keep_last: int = 4
    compress_delay_s: float = 0.02
    compressor: str = "head-tail"
    llm: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class WorkerResult:
    acks: list[Ack] = field(default_factory=list)
    turns: int = 0
    appended: int = 0
    outcomes: Counter = field(default_factory=Counter)
    interrupts: int = 0
    interrupts_won: int = 0
    errors: Counter = field(default_factory=Counter)
    error_examples: list[str] = field(default_factory=list)

    def merge(self, other: WorkerResult) -> None:
        self.acks += other.acks
        self.turns += other.turns
        self.appended += other.appended
        self.outcomes.update(other.outcomes)
        self.interrupts += other.interrupts
        self.interrupts_won += other.interrupts_won
        self.errors.update(other.errors)
        room = _MAX_ERROR_EXAMPLES - len(self.error_examples)
        self.error_examples += other.error_examples[:max(0, room)]

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
    def compress(self, root: str, mode: str) -> str: ...
    def compress_and_interrupt(self, root: str, mode: str) -> tuple[str, bool]: ...
    def after_turn(self, root: str) -> None: ...


class SlowCompressor:
    """Wraps a compressor with a model-like latency (cancellable), so appends land
    during the summary (the tail) and interrupts can win."""

    def __init__(self, inner: Compressor, delay_s: float) -> None:
        self.inner = inner
        self.delay_s = delay_s
        self.name = inner.name

    def for_policy(self, policy: CompactionPolicy) -> SlowCompressor:
        hook = getattr(self.inner, "for_policy", None)
        return SlowCompressor(hook(policy), self.delay_s) if callable(hook) else self

    def compress(self, messages: Sequence[StoredMessage], *, target_tokens: int,
                 cancel: threading.Event) -> Sequence[Message]:
        if self.delay_s and cancel.wait(self.delay_s):
            return [m.as_message() for m in messages]  # cancelled: the result is discarded
        return self.inner.compress(messages, target_tokens=target_tokens, cancel=cancel)


def session_ids(prefix: str, sessions: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(sessions)]


def make_policy(config: WorkerConfig) -> CompactionPolicy:
    # Even workers rotate automatically, odd ones compact in place: a multi-process
    # run mixes both on the same sessions (manual compresses pick either at random).
    return CompactionPolicy(
        max_tokens=config.max_tokens, target_tokens=config.target_tokens,
        keep_last=config.keep_last, mode="rotate" if config.worker % 2 == 0 else "in_place",
        lease_ttl_s=15.0, max_compaction_s=30.0, cooldown_s=2.0, ask_timeout_s=30.0,
    )


def make_compressor(config: WorkerConfig) -> Compressor:
    if config.compressor == "llm":
        from .llm import LLMCompressor

        return LLMCompressor(**config.llm)
    return SlowCompressor(HeadTailCompressor(), config.compress_delay_s)


def build_jobs(config: WorkerConfig) -> list[tuple[str, int]]:
    """This worker's (session, turn) pairs: every session, its share of the turns,
    round by round so all sessions advance together; shuffled inside a round."""
    rng = random.Random(f"{config.seed}:{config.worker}:jobs")
    roots = session_ids(config.prefix, config.sessions)
    jobs = []
    for turn in range(config.worker, config.turns, config.workers):
        round_jobs = [(root, turn) for root in roots]
        rng.shuffle(round_jobs)
        jobs += round_jobs
    return jobs


def run_worker(
    config: WorkerConfig, gateway: Gateway, progress: Callable[[int], None]
) -> WorkerResult:
    """Run this worker's jobs on ``config.threads`` threads; every thread is joined."""
    jobs = build_jobs(config)
    lock = threading.Lock()
    results = [WorkerResult() for _ in range(config.threads)]

    def next_job() -> tuple[str, int] | None:
        with lock:
            return jobs.pop() if jobs else None

    def loop(index: int) -> None:
        while (job := next_job()) is not None:
            root, turn = job
            # seeded per turn, not per thread: a seed replays the same events
            # whichever thread happens to pick each turn up
            rng = random.Random(f"{config.seed}:{root.removeprefix(config.prefix)}:{turn}")
            _run_turn(gateway, root, turn, config, rng, results[index])
            progress(1)

    jobs.reverse()  # pop() from the end keeps the round order
    threads = [threading.Thread(target=loop, args=(i,), name=f"sim-worker-{i}")
               for i in range(config.threads)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    except BaseException:  # Ctrl-C: let every thread finish its current turn, then stop
        with lock:
            jobs.clear()
        for t in threads:
            t.join()
        raise
    total = WorkerResult()
    for r in results:
        total.merge(r)
    return total


def _run_turn(gateway: Gateway, root: str, turn: int, config: WorkerConfig,
              rng: random.Random, result: WorkerResult) -> None:
    tag = f"{root} w{config.worker} t{turn}"
    try:
        review = _maybe_start_review(gateway, root, tag, rng)
        _append(gateway, root, [Message("user", f"user ask {tag}: {_words(rng)}")], result)
        if rng.random() < P_TOOL:
            call = {"id": f"call-{turn}", "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"}}
            _append(gateway, root, [Message("assistant", "", tool_calls=[call])], result)
            _append(gateway, root, [Message("tool", f"tool result {tag}", tool_call_id=f"call-{turn}")], result)
        _append(gateway, root, [Message("assistant", f"reply {tag}: {_words(rng)}")], result)
        if review is not None:
            thread, review_result = review
            thread.join(STEP_TIMEOUT_S)
            result.merge(review_result)
        if rng.random() < P_BACKGROUND:
            event = Message("user", f"Background process proc_{turn} completed ({tag})",
                            meta={"synthetic": True})
            _append(gateway, root, [event, Message("assistant", f"noted {tag}")], result)
        _maybe_compress(gateway, root, rng, result)
        gateway.after_turn(root)
        result.turns += 1
    except Exception as exc:  # counted as a violation in the report, never lost
        result.record_error(f"turn {tag}", exc)


def _append(gateway: Gateway, root: str, messages: list[Message], result: WorkerResult,
            *, review: bool = False) -> None:
    stored = gateway.append(root, messages, review=review)
    result.appended += len(stored)
    result.acks += [Ack(root, m.id, m.text) for m in stored]


def _maybe_start_review(gateway: Gateway, root: str, tag: str, rng: random.Random
                        ) -> tuple[threading.Thread, WorkerResult] | None:
    """The background review shares the session id and writes while the turn goes on."""
    if rng.random() >= P_REVIEW:
        return None
    note = Message("assistant", f"review note {tag}: {_words(rng)}", meta={"review": True})
    local = WorkerResult()

    def review() -> None:
        try:
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


_VOCABULARY = ("deploy", "invoice", "lisbon", "retry", "schema", "cache", "ticket", "refund",
               "latency", "budget", "weekend", "printer", "invoice", "migration", "backup")


def _words(rng: random.Random) -> str:
    return " ".join(rng.choice(_VOCABULARY) for _ in range(rng.randint(8, 30)))


def process_main(config: WorkerConfig, result_path: str, counter: Any) -> None:
    """Entry point of a spawned worker process: own store, own registry, own holder."""
    from .simulate_gateways import open_gateway

    def progress(n: int) -> None:
        with counter.get_lock():
            counter.value += n

    with open_gateway(config) as gateway:
        result = run_worker(config, gateway, progress)
    with open(result_path, "w", encoding="utf-8") as fh:
        fh.write(result.to_json())
