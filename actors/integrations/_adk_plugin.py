"""The ADK plugin that tells `SessionService` where each run starts and ends.

Without it an invocation's turn closes at the first agent's final response, so the
agents of a pipeline (a ``SequentialAgent``) each keep their part contiguous, but
another run may land between two parts. With it (``App(..., plugins=[service.plugin()])``)
the turn closes when the run ends: the whole run is contiguous.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from google.adk.plugins.base_plugin import BasePlugin

from ._adk_events import store_id

if TYPE_CHECKING:
    from ._adk_turns import InvocationTurns

__all__ = ["RunTurnsPlugin"]


class RunTurnsPlugin(BasePlugin):
    """Keeps each run's turn open from its start to its end (see the module docstring)."""

    def __init__(self, turns: InvocationTurns) -> None:
        super().__init__(name="session_actors_run_turns")
        self._turns = turns

    async def before_run_callback(self, *, invocation_context: Any) -> None:
        self._turns.manage(invocation_context.invocation_id)

    async def after_run_callback(self, *, invocation_context: Any) -> None:
        session = invocation_context.session
        await self._turns.finish(
            store_id(session.app_name, session.user_id, session.id), invocation_context.invocation_id
        )
