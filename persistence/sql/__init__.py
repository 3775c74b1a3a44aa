"""The SQL store every backend shares: `SqlStore` runs each `Store` operation once,
over a `Dialect` that supplies only what its database does differently."""

from ._dialect import Dialect
from ._store import SqlStore

__all__ = ["Dialect", "SqlStore"]
