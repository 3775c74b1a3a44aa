-- Announced turn holders (PostgreSQL, direct connections; persistence/postgres/_holders.py):
-- a registry's session-level advisory lock named after its holder, and the row that says
-- the name was announced.

-- A registry announces its holder name (0013_holders.sql): a session-level advisory
-- lock keyed by the schema and the name, held on a connection of its own for the
-- registry's life, and a row in holders. Shared, so two registries that share one
-- name (given by hand) both hold it; a probe takes it exclusive for an instant.

-- name: holder_keepalives
-- The announcing connection's server-side TCP keepalives: a host that vanished
-- without closing its socket loses its session (and the lock) in some 8 s, not
-- the kernel's two hours (ignored on a Unix socket, where a close is always seen).
SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 1; SET tcp_keepalives_count = 3;

-- name: lock_holder
-- Hold the holder's lock for this database session (released when it ends: a
-- close, a kill -9 of the process, pg_terminate_backend, a cut connection).
SELECT pg_advisory_lock_shared(
    hashtextextended('session_actors.holder:' || current_schema() || ':' || %(holder)s::text, 0));

-- name: record_holder
-- After lock_holder: the name is announced (a probe of a name without a row says
-- nobody can tell).
INSERT INTO holders (holder, announced_at)
VALUES (%(holder)s, extract(epoch FROM clock_timestamp())::double precision)
ON CONFLICT (holder) DO UPDATE SET announced_at = excluded.announced_at;

-- name: forget_holder
-- A registry's clean close, before its connection (and the lock) goes: the name is
-- no longer announced. Two registries that share one name (given by hand): the
-- first to close withdraws it for both, and a dead turn of the other then waits
-- out its lease.
DELETE FROM holders WHERE holder = %(holder)s;

-- name: holder_alive
-- true: a session holds the holder's lock (alive, maybe frozen); false: the name
-- is announced and no session holds its lock (its session is gone); NULL: never
-- announced (or withdrawn), nobody can tell. The row is read first: a withdrawn
-- holder's lock may outlive its row an instant (its connection's close does not
-- wait for the server to end the session). The exclusive try-lock is a
-- transaction lock: it ends with this statement's transaction, so an announcer is
-- kept waiting an instant at most.
SELECT CASE
    WHEN NOT EXISTS (SELECT 1 FROM holders WHERE holder = %(holder)s) THEN NULL
    WHEN NOT pg_try_advisory_xact_lock(
        hashtextextended('session_actors.holder:' || current_schema() || ':' || %(holder)s::text, 0))
    THEN true
    ELSE false
END AS alive;
