-- Read-only queries of the session-actors CLI (actors/cli_db.py).

-- name: cli_schema_present
-- Does the connection's search_path hold a session-actors store? Asked before
-- open_store, which would create the schema.
SELECT to_regclass('schema_version') IS NOT NULL AS present;
