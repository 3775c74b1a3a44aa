"""The pytest plugin (registered through the ``pytest11`` entry point): the
``session_harness`` fixture.

``session_harness(compressor=..., policy=..., prefill=...)`` builds a `Harness`
whose databases live in the test's ``tmp_path``; every harness it built is closed
when the test ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from protocol import Message

    from ._harness import Harness

__all__ = ["session_harness"]


@pytest.fixture
def session_harness(tmp_path: Path) -> Iterator[Callable[..., Harness]]:
    """A factory of harnesses kept in this test's ``tmp_path``."""
    from ._harness import Harness  # imported when used: pytest loads every plugin at start

    made: list[Harness] = []

    def make(compressor: Any = None, policy: Any = None, prefill: Sequence[Message] = ()) -> Harness:
        folder = tmp_path / f"harness-{len(made) + 1}"
        folder.mkdir()
        harness = Harness(compressor=compressor, policy=policy, store=folder, prefill=prefill)
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.close()
