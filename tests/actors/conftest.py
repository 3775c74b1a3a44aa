"""Fixtures for the actor tests: registries on real stores, closed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from actors import CompactionPolicy, SessionRegistry
from persistence import open_store

from .helpers import FaultyStore


@pytest.fixture
def make_registry(store_url: str) -> Iterator[Callable[..., SessionRegistry]]:
    """``make_registry(compressor, faulty=False, on_outcome=None, **policy)``: a registry with its own
    store connection on the test database (a second call stands for a second process)."""
    made: list[tuple[SessionRegistry, Any]] = []

    def make(
        compressor: Any = None,
        *,
        faulty: bool = False,
        holder: str | None = None,
        on_outcome: Any = None,
        **policy: Any,
    ) -> SessionRegistry:
        store = open_store(store_url)
        wrapped = FaultyStore(store) if faulty else store
        registry = SessionRegistry(
            wrapped, compressor=compressor, policy=CompactionPolicy(**policy), holder=holder, on_outcome=on_outcome
        )
        made.append((registry, store))
        return registry

    yield make
    for registry, store in reversed(made):
        registry.close()
        store.close()
