-- session-actors SQLite schema, version 11: keyed turns.
--
-- A turn may carry an idempotency key, unique per conversation (the incarnation a
-- lineage's sessions share, as message_keys): a request retried after its turn
-- completed answers with what that turn stored instead of running again. A row
-- names the turn its key opened last (its token) and what became of it: 'open'
-- while it runs (or lies dead), 'completed' once its holder closed it (the key then
-- replays it), 'sealed' once seal_turn ended it (the key opens a fresh turn).
-- Erasure deletes a lineage's rows with it.
CREATE TABLE turn_keys (
    incarnation TEXT NOT NULL,
    key         TEXT NOT NULL,
    token       INTEGER NOT NULL,
    state       TEXT NOT NULL DEFAULT 'open',
    opened_at   REAL NOT NULL,
    PRIMARY KEY (incarnation, key),
    CONSTRAINT turn_keys_state_valid CHECK (state IN ('open', 'completed', 'sealed'))
) WITHOUT ROWID;
-- close_turn and seal_turn find a turn's key by its token (unique in the file)
CREATE INDEX turn_keys_token_idx ON turn_keys (token);
