-- Schema bookkeeping (SQLite): which migrations a file has had. The migrations
-- themselves are migrations/NNNN_*.sql; the file's write lock serializes them.

-- name: create_schema_version
CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL
)

-- name: schema_version_exists
SELECT count(*) AS present FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'

-- name: current_version
SELECT coalesce(max(version), 0) AS version FROM schema_version

-- name: record_version
INSERT INTO schema_version (version, applied_at) VALUES (:version, :now)
