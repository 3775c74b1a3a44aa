-- session-actors schema, version 6 (SQLite): turns across processes, idempotent appends.
--
-- 1. Turn leases. A session row holds its live turn lease: the holder, a token and
-- the expiry (store clock). An append is admitted only while no other holder's turn
-- lease is live, or when it carries the live lease's token: the check sits in the
-- append's own statement (the seq counter UPDATE, or the batch's checked INSERT).
-- A rotation copies the lease to the continuation. A closed lease keeps its token
-- (holder NULL), so the turn it names can still be rolled back.
ALTER TABLE sessions ADD COLUMN turn_holder TEXT;
ALTER TABLE sessions ADD COLUMN turn_token INTEGER;
ALTER TABLE sessions ADD COLUMN turn_expires_at REAL;
ALTER TABLE sessions ADD COLUMN turn_interrupted INTEGER NOT NULL DEFAULT 0;
CREATE INDEX sessions_turn_token_idx ON sessions (turn_token) WHERE turn_token IS NOT NULL;
-- the interrupt flags a holder polls for all its turns at once
CREATE INDEX sessions_turn_interrupted_idx ON sessions (turn_holder) WHERE turn_interrupted = 1;

-- Turn tokens come from one counter of the whole file: never reset, not even by an
-- erasure and re-creation of the same id.
CREATE TABLE counters (
    name  TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
INSERT INTO counters (name, value) VALUES ('turn_token', 0);

-- The turn a row was appended in (its lease's token; NULL outside turns): what a
-- compaction must not snapshot into and what a rollback retracts. Copies keep it.
ALTER TABLE messages ADD COLUMN turn INTEGER;

-- 2. Idempotency keys. A message may carry a key, unique per conversation (the
-- incarnation a lineage's sessions share). The claim table makes it unique: an
-- append claims each key first, and a key already claimed returns the stored row.
-- Copies carried by a compaction keep their key.
ALTER TABLE messages ADD COLUMN key TEXT;
CREATE INDEX messages_key_idx ON messages (key) WHERE key IS NOT NULL;
CREATE TABLE message_keys (
    incarnation TEXT NOT NULL,
    key         TEXT NOT NULL,
    PRIMARY KEY (incarnation, key)
) WITHOUT ROWID;
