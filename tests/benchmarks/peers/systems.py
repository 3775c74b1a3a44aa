"""The systems the peers' workload runs against: a table of small adapter classes, one per system.

`SYSTEMS` is the table ``bench_peers`` reads, in its order. A row names its pip
``requirements`` (installed on demand in a virtual environment of its own; empty: the system
runs from this tree) and the ``distributions`` whose versions the report names. Adding a row
(another framework, or another framework's path through session-actors) is a `System`
subclass with ``turn``, ``note`` and ``read``, and one line here. A framework's path through
session-actors subclasses `ours.TurnsOn` (``uses_tree``) and names the framework in
``requirements``: it then runs in a virtual environment of its own holding the framework and
session-actors' dependencies, with this tree on PYTHONPATH.
"""

from __future__ import annotations

from tests.benchmarks.peers import others, ours
from tests.benchmarks.peers.base import System

ROWS: list[type[System]] = [
    ours.TurnsOn,
    ours.TurnsOff,
    ours.PydanticAI,
    ours.ADK,
    others.AgentsSDK,
    others.Hermes,
    others.ADK,
    others.LangGraph,
]

SYSTEMS: dict[str, type[System]] = {row.name: row for row in ROWS}
