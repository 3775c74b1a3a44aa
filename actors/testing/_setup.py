"""`Setup`: what one exploration runs (its paths and options), checked once."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

from protocol import InvalidArgumentError
from protocol._checks import check_duration

from ._paths import PathHandle

__all__ = ["Check", "PathFn", "Setup"]

PathFn = Callable[[PathHandle], object]
Check = Callable[..., object]  # of the live transcript, or of a HarnessView


@dataclass(frozen=True, slots=True)
class Setup:
    """What one exploration runs: its paths and options, checked once."""

    paths: Mapping[str, PathFn]
    review: frozenset[str]
    session_id: str
    check: Check | None
    process_of: dict[str, str]  # path -> the process it runs in
    pauses: dict[str, float]

    @staticmethod
    def of(
        paths: Mapping[str, PathFn],
        review: Collection[str],
        session_id: str,
        check: Check | None,
        processes: Mapping[str, str] | None,
        pauses: Mapping[str, float] | None,
    ) -> Setup:
        if not paths or not all(isinstance(n, str) and n and callable(f) for n, f in paths.items()):
            raise InvalidArgumentError("paths must map non-empty names to functions of a handle")
        _check_names("review", review, paths)
        _check_names("processes", processes or {}, paths)
        process_of = {name: (processes or {}).get(name, "main") for name in paths}
        if not all(isinstance(p, str) and p for p in process_of.values()):
            raise InvalidArgumentError("processes must map paths to non-empty process names")
        pauses = dict(pauses or {})
        _check_names("pauses", pauses, process_of.values())
        seconds = {process: check_duration(s, f"pauses[{process!r}]") for process, s in pauses.items()}
        if check is not None and not callable(check):
            raise InvalidArgumentError(f"check must be callable or None, got {check!r}")
        return Setup(paths, frozenset(review), session_id, check, process_of, seconds)


def _check_names(what: str, names: Collection[str], known: Collection[str]) -> None:
    unknown = set(names) - set(known)
    if unknown:
        raise InvalidArgumentError(f"{what} names what does not exist: {sorted(unknown)}")
