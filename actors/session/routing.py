"""How handles and actors reach the registry: the narrow interface it offers them.

Handles and actors depend on `Router`, not on `SessionRegistry`, so the runtime's
modules import one way (registry -> actor, handle -> routing). The methods are
private: they are the runtime's own collaboration, not user API.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from protocol import CompressionOutcome

    from ..compaction._attempt import Attempt
    from ..compaction._loop import CompressorLoop
    from ..compaction._policy import CompactionPolicy
    from .liveness import HolderProbe
    from .request import Request
    from .slot import Slot
    from .turns import TurnGate

__all__ = ["Router"]


class Router(Protocol):
    """What a `SessionRegistry` does for its handles and actors."""

    policy: CompactionPolicy
    #: Tells whether another turn's holder process is gone (`TurnLeases`).
    holders: HolderProbe
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

    def _check_accepting_turns(self) -> None:
        """`RegistryClosedError` while a close drains: it lets open turns finish, opens none."""
        ...

    def _note_compress_request(self) -> None:
        """Count one ``compress()`` request (``stats()``)."""
        ...

    def _track_attempt(self, attempt: Attempt) -> None:
        """An attempt started: the registry keeps it until it is over (a close waits for it)."""
        ...

    def _post_outcome(self, outcome: CompressionOutcome) -> None:
        """An attempt's outcome, once, after its cleanup and its callers: for ``on_outcome``."""
        ...
