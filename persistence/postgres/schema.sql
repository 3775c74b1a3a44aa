-- Schema bookkeeping for the PostgreSQL backend. Run inside one transaction that
-- first takes the migration lock, so several processes opening one database at
-- once apply each migration exactly once. Advisory locks are used ONLY here,
-- never for leases.

-- name: migration_lock
-- One lock per schema (tests use one schema each; the key is a hash of its name).
SELECT pg_advisory_xact_lock(hashtext('session_actors.migrate:' || current_schema()));

-- name: create_schema_version
-- The table of applied migrations, created when missing.
CREATE TABLE IF NOT EXISTS schema_version (
    version    integer PRIMARY KEY,
    applied_at double precision NOT NULL
);

-- name: schema_version_exists
-- Whether the table of applied migrations exists.
SELECT to_regclass('schema_version') IS NOT NULL AS present;

-- name: current_version
-- The newest migration applied (0: none).
SELECT coalesce(max(version), 0) AS version FROM schema_version;

-- name: record_version
-- Record a migration as applied.
INSERT INTO schema_version (version, applied_at)
VALUES (%(version)s, extract(epoch FROM clock_timestamp())::double precision);
