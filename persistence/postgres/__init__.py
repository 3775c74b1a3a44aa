"""The PostgreSQL backend, for several hosts on one database (the ``postgres`` extra).

psycopg is imported when a store is opened, not when this package is imported.
"""

from ._store import PostgresStore

__all__ = ["PostgresStore"]
