-- session-actors schema, version 3 (SQLite): incarnations.
-- A random token set when a session is created and inherited by its
-- continuations: it names the conversation, so an append or a retraction meant
-- for a lineage that was erased can never land in a new one started under the
-- same id. Sessions created before this version share the empty token.

ALTER TABLE sessions ADD COLUMN incarnation TEXT NOT NULL DEFAULT '';
