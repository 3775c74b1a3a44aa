"""Is the process holding a turn still alive? A registry's default holder name ends
with its process's mark: the host's boot id, the pid and the process's start time
(Linux's /proc). A registry on the same host that waits behind that holder's turn
reads /proc: a pid that no longer runs (or runs another process, or is a zombie)
means the holder died, and its turn is sealed at once instead of after its lease
lapses. A holder on another host, a name without a mark or a platform without /proc
is never judged dead here: its lease lapses as always. Fencing tokens still decide
every write (a seal names the token it ends)."""

from __future__ import annotations

import functools
import os

__all__ = ["holder_is_dead", "process_mark"]

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
