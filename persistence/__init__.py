"""Durable storage for session-actors: the `Store` interface and its backends.

``open_store(path)`` or ``open_store("sqlite:///path")`` opens the embedded SQLite
backend (the default); ``open_store("postgresql://...")`` opens PostgreSQL (needs
the ``postgres`` extra). ``SourceScopedStore(store, source)`` is a view of a
store that reaches the sessions of one source only.
"""

import logging

from ._scoped import SourceScopedStore
from ._store import HolderAwareStore, Store, StoreFeatures, SubmittingStore
from ._urls import open_store

logging.getLogger("session_actors").addHandler(logging.NullHandler())

__all__ = ["HolderAwareStore", "SourceScopedStore", "Store", "StoreFeatures", "SubmittingStore", "open_store"]
