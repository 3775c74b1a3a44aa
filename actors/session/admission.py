"""Who may run a step of a session now: the admission rule every path obeys.

Within one registry a session's steps (appends, turn changes, reads, the
compaction flow's steps) never overlap and never overtake one another. One lock
serializes them, the slot's exclusive lock (`Slot.exclusive`); each path takes it
its own way:

- **the mailbox**: the actor handles each message holding it
  (`SessionActor.on_receive`); a request that meets another handle's open turn is
  held by the turn gate (`TurnGate.must_hold`) and served right after that turn
  closes;
- **caller-runs** (``handle.append``): the caller takes it without waiting and
  runs the append on its own thread (`SessionActor.append_here`), only when
  `runs_here` says nothing could be overtaken;
- **submitted** (``handle.append_async``): the event loop takes it the same way and
  hands it to the store's group commit, which lets it go when the commit answers
  (`SessionActor.submit_here`, `submitted.SubmittedAppends`).

A path that may not run here falls back to the mailbox, behind everything queued.
Across processes the store keeps the guarantees (fencing tokens, the seq UNIQUE
constraint); this rule is what keeps one registry's own paths in order.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .slot import Slot
    from .turns import TurnGate

__all__ = ["Forwarded", "runs_here"]


class Forwarded(Exception):
    """The request was handed to the actor that now serves the live id."""


def runs_here(slot: Slot, mailbox: Sized, turns: TurnGate, sender: int) -> bool:
    """With ``slot.exclusive`` held: may a step of handle ``sender`` run off the
    mailbox now? Only when nothing could be overtaken or entered: the slot is open
    and not handed over, no request is counted pending (an enqueue counts it before
    it puts it in the mailbox), the mailbox is empty, and no other handle's turn is
    open nor anything held behind one. A message enqueued after this check waits
    for the exclusive lock, so it is ordered after the step, as it arrived after it."""
    return not (slot.closed or slot.successor is not None or slot.pending or mailbox or not turns.admits(sender))
