"""How handles and actors reach the registry: the mailbox envelope and the narrow
interface the registry offers them.

Handles and actors depend on `Router`, not on `SessionRegistry`, so the runtime's
modules import one way (registry -> actor, handle -> routing). The methods are
private: they are the runtime's own collaboration, not user API.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from protocol import CompressionOutcome

    from ..compaction._attempt import Attempt
    from ..compaction._loop import CompressorLoop
    from ..compaction._policy import CompactionPolicy
    from .slot import Slot
    from .turns import TurnGate

__all__ = ["Request", "Router"]


@dataclass(slots=True, eq=False)
class Request:
    """A mailbox envelope: a protocol command, the future its caller waits on, and
    which handle sent it (``sender``: turns hold other handles' mutating calls).

    ``held`` is set by the actor when it holds the request behind another handle's
    open turn; the caller then waits up to ``policy.held_wait_s`` instead of
    ``ask_timeout_s`` before it withdraws the request.

    A claimed append that must go on to another actor (its session moved to a live id
    that actor serves) was not applied yet, but its reply can no longer be withdrawn:
    ``gate`` (set before it is forwarded) is the claim that the next actor takes
    before applying it, and ``gave_up`` tells the forwarding actor the caller left.
    """

    command: Any
    reply: Future[Any]
    sender: int = 0
    held: bool = False
    gate: threading.Lock | None = None
    gave_up: bool = False
    # A turn that met another holder's: the token it interrupted, the token its
    # lease is to roll back, and since when it has been held (monotonic; 0: never).
    interrupted: int | None = None
    rollback: int | None = None
    held_since: float = 0.0
    sealed: int | None = None  # the dead turn sealed for it (sealed once per turn)

    def withdraw_forwarded(self) -> bool:
        """Caller side, after ``reply.cancel()`` failed: True when the request was
        forwarded and no actor has started applying it (it never will)."""
        self.gave_up = True
        gate = self.gate
        return gate is not None and gate.acquire(False)

    def forwarding(self) -> bool:
        """Actor side, before forwarding a claimed request: False if its caller
        already gave up (then nobody may apply it)."""
        self.gate = threading.Lock()
        return not self.gave_up

    def take_gate(self) -> bool:
        """Actor side, before applying: False when the caller withdrew it while forwarded."""
        gate = self.gate
        return gate is None or gate.acquire(False)


class Router(Protocol):
    """What a `SessionRegistry` does for its handles and actors."""

    policy: CompactionPolicy
    #: The event loop thread async compressors run on (one per registry).
    _compressor_loop: CompressorLoop

    def _dispatch(self, slot: Slot, request: Request) -> Slot:
        """Enqueue ``request`` on the actor now serving ``slot``; returns that slot."""
        ...

    def _forward(self, slot: Slot, request: Request) -> None:
        """Re-send a request that reached a handed-over actor to its successor."""
        ...

    def _request_done(self, slot: Slot) -> None:
        """One request of ``slot`` was handled (for the busy count and the idle clock)."""
        ...

    def _relocate(self, slot: Slot, live_id: str, turns: TurnGate) -> bool:
        """Point ``slot`` at ``live_id``; False if another slot serves it (hand-over)."""
        ...

    def _interrupt(self, slot: Slot) -> bool:
        """Cancel the attempt in flight of the actor serving ``slot``."""
        ...

    def _retire_erased(self, slot: Slot) -> None:
        """The store no longer has ``slot``'s lineage: stop its actor for good."""
        ...

    def _note_compress_request(self) -> None: ...

    def _track_attempt(self, attempt: Attempt) -> None: ...

    def _post_outcome(self, outcome: CompressionOutcome) -> None:
        """An attempt's outcome, once, after its cleanup and its callers: for ``on_outcome``."""
        ...
