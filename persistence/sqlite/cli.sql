-- Read-only queries of the session-actors CLI (actors/cli_db.py).

-- name: cli_schema_present
-- Is this file a session-actors store? Asked before open_store, which would
-- create the schema in any file it is given.
SELECT count(*) AS present FROM sqlite_master WHERE type = 'table' AND name = 'schema_version';
