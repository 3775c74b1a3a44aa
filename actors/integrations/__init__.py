"""Adapters from session-actors to agent frameworks, each behind its own extra."""

__all__: list[str] = []
