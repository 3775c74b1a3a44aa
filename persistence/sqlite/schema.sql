-- Schema bookkeeping (SQLite): which migrations a file has had. The migrations
-- themselves are migrations/NNNN_*.sql; the file's write lock serializes them.

-- name: create_schema_version
-- The table of applied migrations, created when missing.
CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL
)

-- name: schema_version_exists
-- Whether the table of applied migrations exists.
SELECT count(*) AS present FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'

-- name: current_version
-- The newest migration applied (0: none).
SELECT coalesce(max(version), 0) AS version FROM schema_version

-- name: record_version
-- Record a migration as applied.
INSERT INTO schema_version (version, applied_at) VALUES (:version, :now)
