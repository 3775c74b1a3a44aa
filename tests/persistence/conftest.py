"""Fixtures of the persistence tests."""

from __future__ import annotations

import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from persistence import _hooks as hooks


@pytest.fixture
def fault_hook() -> Iterator[Callable[[Callable[[str, Any], None]], None]]:
    """Install ``reached(point, operations)`` as this process's fault hook (the way
    kill points reach the stores) until the test ends."""
    installed: list[Any] = []

    def install(reached: Callable[[str, Any], None]) -> None:
        hook = types.SimpleNamespace(reached=reached)
        hooks.install(hook)
        installed.append(hook)

    yield install
    for hook in reversed(installed):
        hooks.uninstall(hook)
