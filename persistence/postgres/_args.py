"""Argument checks of the PostgreSQL store that `persistence._rows` does not cover.

Each raises `InvalidArgumentError` (a `ValueError`) before anything is sent to
the database.
"""

from __future__ import annotations

from typing import cast

from protocol._checks import check_count, check_duration

from .._rows import check_store_options

__all__ = ["MAX_POOL_SIZE", "check_pool_options"]

MAX_POOL_SIZE = 1000


def check_pool_options(
    min_size: object,
    max_size: object,
    patience_s: object,
    connect_timeout_s: object,
    max_content_bytes: object,
) -> None:
    """The constructor options of `PostgresStore`: pool sizes (``max_size`` 1 to 1000,
    ``min_size`` 0 to ``max_size``), timeouts as durations, the shared store options."""
    check_count(max_size, "max_size", minimum=1, maximum=MAX_POOL_SIZE)
    check_count(min_size, "min_size", maximum=cast(int, max_size))  # checked just above
    check_duration(connect_timeout_s, "connect_timeout_s")
    check_store_options(patience_s=patience_s, max_content_bytes=max_content_bytes)
