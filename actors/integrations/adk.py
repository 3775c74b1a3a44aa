"""`SessionService`: Google ADK's ``BaseSessionService`` over a `SessionRegistry`.

``Runner(agent=..., app_name=..., session_service=SessionService(registry))`` keeps
ADK sessions in session-actors: events go through the session's actor and round-trip
exactly, ``app:``/``user:``/session state is kept beside them (``temp:`` never is),
each invocation is a keyed turn (two ``run_async`` on one session never interleave, a
replayed invocation runs once), and compaction is the registry's. See docs/adk.md.

ADK is an optional extra (``pip install 'session-actors[adk]'``), imported when a name
of this module is first used, never when it is imported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol import ConfigurationError

if TYPE_CHECKING:
    from ._adk_service import SOURCE, SessionAlreadyExistsError, SessionService, UnknownSessionError

__all__ = ["SOURCE", "SessionAlreadyExistsError", "SessionService", "UnknownSessionError"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        from . import _adk_service
    except ImportError as exc:
        if not (exc.name or "").startswith("google"):
            raise
        raise ConfigurationError("SessionService needs Google ADK: pip install 'session-actors[adk]'") from exc
    return getattr(_adk_service, name)
