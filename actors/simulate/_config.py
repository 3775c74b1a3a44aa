"""What one simulate worker is configured with, and the policy and compressor it builds."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from protocol import Message, StoredMessage

from ..compaction._policy import CompactionPolicy
from ..compressors import Compressor, HeadTailCompressor, LLMCompressor

__all__ = [
    "STEP_TIMEOUT_S",
    "SlowCompressor",
    "WorkerConfig",
    "make_compressor",
    "make_policy",
    "owned_roots",
    "owns",
    "owns_turn",
    "session_ids",
]

#: How long one step waits on a barrier or a helper thread before calling it an error.
STEP_TIMEOUT_S = 60.0


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
    lease_ttl_s: float = 15.0
    #: user turns of every session come from every worker (not routed to one), and
    #: some appends are retried as if their acknowledgement was lost (same key)
    unrouted: bool = False


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

    def compress(
        self, messages: Sequence[StoredMessage], *, target_tokens: int, cancel: threading.Event
    ) -> Sequence[Message]:
        if self.delay_s and cancel.wait(self.delay_s):
            return [m.as_message() for m in messages]  # cancelled: the result is discarded
        return self.inner.compress(messages, target_tokens=target_tokens, cancel=cancel)


def session_ids(prefix: str, sessions: int) -> list[str]:
    return [f"{prefix}{i:03d}" for i in range(sessions)]


def owned_roots(config: WorkerConfig) -> list[str]:
    """The sessions whose user turns this worker runs.

    Routed (the default), a session's turns come from one worker process; other
    workers still compact it (manual compresses reach any session). Unrouted, every
    worker runs turns on every session (`owns_turn` picks which turns).
    """
    return [root for root in session_ids(config.prefix, config.sessions) if owns(config, root)]


def owns(config: WorkerConfig, root: str) -> bool:
    """Whether ``root``'s user turns are run by this worker (see `owned_roots`)."""
    return config.unrouted or int(root.removeprefix(config.prefix)) % config.workers == config.worker


def owns_turn(config: WorkerConfig, root: str, turn: int) -> bool:
    """Unrouted: turn ``turn`` of ``root`` is this worker's (consecutive turns of a
    session come from different workers); routed: every turn of an owned session."""
    if not config.unrouted:
        return owns(config, root)
    return (int(root.removeprefix(config.prefix)) + turn) % config.workers == config.worker


def make_policy(config: WorkerConfig) -> CompactionPolicy:
    # Even workers rotate automatically, odd ones compact in place: a multi-process
    # run mixes both on the same sessions (manual compresses pick either at random).
    return CompactionPolicy(
        max_tokens=config.max_tokens,
        target_tokens=config.target_tokens,
        keep_last=config.keep_last,
        mode="rotate" if config.worker % 2 == 0 else "in_place",
        lease_ttl_s=config.lease_ttl_s,
        max_compaction_s=30.0,
        cooldown_s=2.0,
        ask_timeout_s=30.0,
    )


def make_compressor(config: WorkerConfig) -> Compressor:
    if config.compressor == "llm":
        return LLMCompressor(**config.llm)
    return SlowCompressor(HeadTailCompressor(), config.compress_delay_s)
