"""The ``session-actors`` command: inspect, check, compact and stress a session store.

`main` is the console script's entry point; each command lives in its own module
(`inspect`, `compact`, `simulate`) and prints through `output`.
"""

from .main import EXIT_OK, EXIT_PROBLEM, EXIT_USAGE, build_parser, main

__all__ = ["EXIT_OK", "EXIT_PROBLEM", "EXIT_USAGE", "build_parser", "main"]
