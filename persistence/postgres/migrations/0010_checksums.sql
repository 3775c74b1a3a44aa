-- session-actors PostgreSQL schema, version 10: per-row checksums.
--
-- A message row carries a hash of its text, kept by the database (a stored
-- generated column: every insert and update computes it, whatever statement
-- wrote the row). fsck recomputes it from the stored text and names the rows
-- that disagree: bytes changed on disk under a cluster without data checksums
-- (initdb --data-checksums) go unnoticed otherwise. hashtextextended is the hash
-- PostgreSQL's hash partitioning relies on, so its values stay the same across
-- versions. Adding the column rewrites the messages table once (it is locked
-- meanwhile).
CREATE FUNCTION message_checksum(role text, content text, name text, tool_call_id text,
                                 tool_calls text, meta text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN hashtextextended(role || E'\x1f' || content || E'\x1f' || coalesce(name, '') || E'\x1f'
                        || coalesce(tool_call_id, '') || E'\x1f' || coalesce(tool_calls, '') || E'\x1f'
                        || meta, 0);

ALTER TABLE messages ADD COLUMN checksum bigint
    GENERATED ALWAYS AS (message_checksum(role, content, name, tool_call_id, tool_calls, meta)) STORED;
