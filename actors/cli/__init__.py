"""The ``session-actors`` command: inspect, check, compact and stress a session store.

`main` is the console script's entry point; each command lives in a private module
of its own (`_inspect`, `_compact`, `_simulate`, ...) and prints through `_output`.
"""

from ._main import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, build_parser, main

__all__ = ["EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "build_parser", "main"]
