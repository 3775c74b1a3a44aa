"""Testing your gateway: the deterministic harness and the test compressors.

`Harness` runs paths (plain functions of a handle) against the real registry,
actors and a real SQLite file, with a deterministic scheduler that explores the
orders their steps can take, and checks the transcript's invariants after each
schedule; a failure's schedule string replays it exactly (``docs/testing.md``).
`GatedCompressor` and `ScriptedCompressor` are compressors for tests that stage
an interleaving by hand.
"""

from ._choosers import ScheduleMismatchError
from ._compressors import CompressorCancelled, GatedCompressor, ScriptedCompressor, SlowCompressor, summary_only
from ._harness import Harness, Report
from ._history import HarnessView
from ._invariants import INVARIANTS, Failure
from ._mutations import mutation
from ._paths import PathHandle
from ._scheduler import DeadlockError, HarnessStuckError

__all__ = [
    "INVARIANTS",
    "CompressorCancelled",
    "DeadlockError",
    "Failure",
    "GatedCompressor",
    "Harness",
    "HarnessStuckError",
    "HarnessView",
    "PathHandle",
    "Report",
    "ScheduleMismatchError",
    "ScriptedCompressor",
    "SlowCompressor",
    "mutation",
    "summary_only",
]
