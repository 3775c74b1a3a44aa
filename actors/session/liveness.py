"""Is the process holding a turn still alive? A registry's default holder name ends
with its process's mark: the host's boot id, the pid and the process's start time
(Linux's /proc). A registry on the same host that waits behind that holder's turn
reads /proc: a pid that no longer runs (or runs another process, or is a zombie)
means the holder died, and its turn is sealed at once instead of after its lease
lapses. A holder on another host, a name without a mark or a platform without /proc
is never judged dead by /proc: its lease lapses as always, unless the store knows
holders (``StoreFeatures.knows_holders``: PostgreSQL on a direct connection), where
every registry announces its holder and `HolderProbe` asks whether that holder's
database session is gone. Fencing tokens still decide every write (a seal names the
token it ends)."""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
from typing import TYPE_CHECKING, cast

from persistence.internal import features_of

from ..scheduling import hooks as _sched

if TYPE_CHECKING:
    from persistence import HolderAwareStore, Store

__all__ = ["HolderProbe", "default_holder", "holder_is_dead", "process_mark"]

logger = logging.getLogger("session_actors.turns")

#: How long a "still alive" answer of the store stands (seconds). The turn keeper
#: nudges every held actor each tick (a tenth of a second) and each nudge asks
#: about its turn's holder: without this, the probe would cost a query per tick
#: per held session. With it, a registry asks about one holder at most about three
#: times a second, however many of its sessions wait behind that holder, and a
#: holder that dies is still noticed within some 0.3 s plus a tick.
ALIVE_FOR_S = 0.3

_BOOT_ID = "/proc/sys/kernel/random/boot_id"
#: Separates a holder's name from its process mark.
MARK = "@"


@functools.cache
def _boot_id() -> str | None:
    try:
        with open(_BOOT_ID, encoding="ascii") as f:
            return f.read().strip().replace("-", "")[:16] or None
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time in clock ticks since boot) of ``pid``; None when no such process."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the command name may hold spaces and parens
    return (fields[0], fields[19]) if len(fields) > 19 else None


def process_mark() -> str | None:
    """``boot.pid.start`` of this process (None without /proc)."""
    boot, stat = _boot_id(), _stat(os.getpid())
    if boot is None or stat is None:
        return None
    return f"{boot}.{os.getpid()}.{stat[1]}"


def holder_is_dead(holder: str) -> bool:
    """True only when ``holder`` names a process of this host that is gone."""
    _, sep, mark = holder.rpartition(MARK)
    parts = mark.split(".") if sep else []
    if len(parts) != 3 or not parts[1].isdigit() or parts[0] != _boot_id():
        return False
    stat = _stat(int(parts[1]))
    return stat is None or stat[0] in ("Z", "X") or stat[1] != parts[2]


class HolderProbe:
    """A registry's ``dead(holder)``: gone by /proc (same host), or, on a store that
    knows holders, announced and without its database session (any host)."""

    def __init__(self, store: Store) -> None:
        self._store = cast("HolderAwareStore", store) if features_of(store).knows_holders else None
        self._lock = threading.Lock()
        self._alive_at: dict[str, float] = {}  # holder -> when the store last said alive (or can't tell)

    def dead(self, holder: str) -> bool:
        if holder_is_dead(holder):
            return True
        store = self._store
        if store is None:
            return False
        now = _sched.monotonic()
        with self._lock:
            if now - self._alive_at.get(holder, -ALIVE_FOR_S) < ALIVE_FOR_S:
                return False
        try:
            alive = store.holder_alive(holder)
        except Exception:  # no answer: the lease stands, as without the probe
            logger.debug("asking whether holder %r is alive failed", holder, exc_info=True)
            alive = None
        with self._lock:
            if alive is False:
                self._alive_at.pop(holder, None)
            else:
                stale = [h for h, at in self._alive_at.items() if now - at >= ALIVE_FOR_S]
                for h in stale:  # only holders asked about in the last ALIVE_FOR_S stay
                    del self._alive_at[h]
                self._alive_at[holder] = now
        return alive is False


def default_holder() -> str:
    """``host:pid:random@mark``: unique per registry instance, readable in ``locks``;
    the mark (`process_mark`) lets a registry on the same host see that this process
    died and seal its turns at once."""
    name = f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
    mark = process_mark()
    return name if mark is None else f"{name}{MARK}{mark}"
