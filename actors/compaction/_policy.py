"""Compaction policy: when to compact, how hard, and the timing of leases and asks."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from protocol import InvalidArgumentError, Message
from protocol._checks import check_count, check_duration
from protocol._records import MODES, CompactionMode
from protocol._turns import SEAL_MODES, SealMode

from ..compressors._base import Compressor

__all__ = [
    "ON_BUSY",
    "CompactionPolicy",
    "OnBusy",
    "TokenCounter",
    "bind_compressor",
    "check_on_busy",
    "estimate_tokens",
]

#: Counts the tokens of a transcript; plug in a real tokenizer for your model.
TokenCounter = Callable[[Sequence[Message]], int]

CHARS_PER_TOKEN = 4
TOKENS_PER_MESSAGE = 4


def estimate_tokens(messages: Sequence[Message]) -> int:
    """A model-agnostic estimate: one token per 4 characters plus 4 per message.

    Counts the text of the content, the name and any tool calls (as compact JSON).
    Good enough for thresholds; pass ``token_counter=`` for exact budgets.
    """
    total = 0
    for message in messages:
        chars = len(message.text) + len(message.name or "")
        if message.tool_calls is not None:
            chars += len(json.dumps(message.tool_calls, separators=(",", ":")))
        total += TOKENS_PER_MESSAGE + math.ceil(chars / CHARS_PER_TOKEN)
    return total


#: Fields that are durations in seconds: > 0 and at most 30 days (`MAX_DURATION_S`).
OnBusy = Literal["enqueue", "reject", "interrupt", "rollback"]
#: The double-texting policies: what a turn does when another one is open.
ON_BUSY: tuple[str, ...] = ("enqueue", "reject", "interrupt", "rollback")


def check_on_busy(on_busy: object) -> None:
    if on_busy not in ON_BUSY:
        raise InvalidArgumentError(f"on_busy must be one of {ON_BUSY}, got {on_busy!r}")


DURATIONS = ("lease_ttl_s", "max_compaction_s", "idle_timeout_s", "ask_timeout_s", "max_turn_s")


@dataclass(frozen=True, slots=True)
class CompactionPolicy:
    """How a `SessionRegistry` compacts. Every field has a production default.

    Ranges (outside them: `InvalidArgumentError` at construction): counts are ints
    up to 2**31 - 1; durations are seconds, finite, > 0 and at most 30 days
    (2,592,000 s); ``cooldown_s`` may also be 0 (no cooldown).

    - ``max_tokens``: auto-compaction threshold checked after appends (None: only
      explicit ``compress()`` calls compact; else >= 1).
    - ``target_tokens``: size the compressor aims for (>= 1).
    - ``keep_last``: messages kept verbatim at the end (used by `HeadTailCompressor`; >= 0).
    - ``mode``: ``"in_place"`` (same session id) or ``"rotate"`` (a child session).
    - ``lease_ttl_s``: compaction lease lifetime, renewed every third of it; the
      registry also reaps expired leases once per this period.
    - ``max_compaction_s``: hard cap on one attempt (then CANCELLED ``"timeout"``).
    - ``cooldown_s``: pause after a failed attempt before the next non-forced one.
    - ``idle_timeout_s``: an actor with no traffic for this long is stopped.
    - ``max_resident``: at most this many actors per registry (least recently used go
      first; >= 1).
    - ``ask_timeout_s``: the longest any call waits on an actor (``compress()`` waits
      ``max_compaction_s + ask_timeout_s``).
    - ``max_turn_s``: a turn (``handle.turn()``) open longer than this is closed by
      the actor, so a forgotten one cannot hold other paths' appends for ever.
    - ``on_busy``: what a turn does when another turn of the session is open, here
      or in another process: ``"enqueue"`` (wait for it), ``"reject"``
      (`SessionBusyError` at once), ``"interrupt"`` (ask its holder to end it, then
      wait) or ``"rollback"`` (interrupt, then retract what it appended). A turn's
      lease lives ``lease_ttl_s`` unless its holder renews it (every third of it).
    - ``dead_turn``: what happens to a turn that ended without its holder closing it
      (the holder died or froze past ``lease_ttl_s``, or it ran past ``max_turn_s``),
      done by whichever path touches the session next, before anything else lands:
      ``"seal"`` retracts its trailing rows that no chat API accepts (a tool call
      without all its results, a result without its call, what followed them; the
      user's messages stay), ``"rollback"`` retracts everything it appended still
      at the end of the live transcript, ``"keep"`` leaves its rows as they are.
      The registry that touches the session first applies its own policy: set it
      alike everywhere.
    - ``token_counter``: counts tokens for ``max_tokens`` (default `estimate_tokens`).
    - ``merge_user_messages``: the compacted set never has two ``user`` messages in a
      row; merged ones keep every ``meta`` in ``meta["merged_from"]`` (False: never
      merge, for providers that need no alternation, e.g. the Responses API).
    """

    max_tokens: int | None = None
    target_tokens: int = 8_000
    keep_last: int = 6
    mode: CompactionMode = "in_place"
    lease_ttl_s: float = 60.0
    max_compaction_s: float = 900.0
    cooldown_s: float = 600.0
    idle_timeout_s: float = 300.0
    max_resident: int = 1024
    ask_timeout_s: float = 30.0
    max_turn_s: float = 300.0
    token_counter: TokenCounter = estimate_tokens
    merge_user_messages: bool = True
    on_busy: OnBusy = "enqueue"
    dead_turn: SealMode = "seal"

    def __post_init__(self) -> None:
        if self.max_tokens is not None:
            check_count(self.max_tokens, "max_tokens", minimum=1)
        check_count(self.target_tokens, "target_tokens", minimum=1)
        check_count(self.keep_last, "keep_last")
        check_count(self.max_resident, "max_resident", minimum=1)
        if self.mode not in MODES:
            raise InvalidArgumentError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in DURATIONS:
            check_duration(getattr(self, name), name)
        check_duration(self.cooldown_s, "cooldown_s", allow_zero=True)  # 0: no cooldown
        if not callable(self.token_counter):
            raise InvalidArgumentError("token_counter must be callable")
        check_on_busy(self.on_busy)
        if self.dead_turn not in SEAL_MODES:
            raise InvalidArgumentError(f"dead_turn must be one of {SEAL_MODES}, got {self.dead_turn!r}")
        if not isinstance(self.merge_user_messages, bool):
            raise InvalidArgumentError(f"merge_user_messages must be a bool, got {self.merge_user_messages!r}")

    @property
    def renew_interval_s(self) -> float:
        """How often a holder renews its lease."""
        return self.lease_ttl_s / 3

    @property
    def self_fence_s(self) -> float:
        """Time since the last successful renew after which a holder stops acting as owner."""
        return self.lease_ttl_s - min(self.lease_ttl_s / 10, 5.0)

    @property
    def auto_retry_after_s(self) -> float:
        """Pause before another automatic attempt after one that did not commit."""
        return min(self.cooldown_s, 30.0)

    @property
    def compress_wait_s(self) -> float:
        """The longest a ``compress()`` call waits for its outcome."""
        return self.max_compaction_s + self.ask_timeout_s

    @property
    def held_wait_s(self) -> float:
        """The longest a call held behind another handle's turn waits before it is withdrawn."""
        return self.max_turn_s + self.ask_timeout_s

    def over_budget(self, messages: Sequence[Message]) -> bool:
        """True when auto-compaction is on and ``messages`` exceed ``max_tokens``."""
        return self.max_tokens is not None and self.token_counter(messages) > self.max_tokens


def bind_compressor(compressor: Compressor | None, policy: CompactionPolicy) -> Compressor | None:
    """Let a compressor adopt policy defaults through its optional ``for_policy`` hook."""
    hook = getattr(compressor, "for_policy", None)
    return hook(policy) if callable(hook) else compressor
