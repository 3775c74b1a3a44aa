-- session-actors PostgreSQL schema, version 5: turns across processes, idempotent appends.
--
-- 1. Turn leases. A session row holds its live turn lease: the holder, a token and
-- the expiry (database clock). An append is admitted only while no other holder's
-- turn lease is live, or when it carries the live lease's token: the check sits in
-- the append's own statement, under the session row lock every append takes. A
-- rotation copies the lease to the continuation. A closed lease keeps its token
-- (holder NULL), so the turn it names can still be rolled back. Tokens come from
-- one sequence: never reset, not even by an erasure and re-creation of an id.
ALTER TABLE sessions
    ADD COLUMN turn_holder text,
    ADD COLUMN turn_token bigint,
    ADD COLUMN turn_expires_at double precision,
    ADD COLUMN turn_interrupted boolean NOT NULL DEFAULT false;
CREATE INDEX sessions_turn_token_idx ON sessions (turn_token) WHERE turn_token IS NOT NULL;
-- the interrupt flags a holder polls for all its turns at once
CREATE INDEX sessions_turn_interrupted_idx ON sessions (turn_holder) WHERE turn_interrupted;
CREATE SEQUENCE turn_tokens;

-- The turn a row was appended in (its lease's token; NULL outside turns): what a
-- compaction must not snapshot into and what a rollback retracts. Copies keep it.
ALTER TABLE messages ADD COLUMN turn bigint;

-- 2. Idempotency keys. A message may carry a key, unique per conversation (the
-- incarnation a lineage's sessions share). The claim table makes it unique: an
-- append claims each key first (a concurrent claim of the same key waits for the
-- first transaction, then finds it taken), and a taken key returns the stored row.
-- Copies carried by a compaction keep their key.
ALTER TABLE messages ADD COLUMN key text;
CREATE INDEX messages_key_idx ON messages (key) WHERE key IS NOT NULL;
CREATE TABLE message_keys (
    incarnation text NOT NULL,
    key         text NOT NULL,
    CONSTRAINT message_keys_pkey PRIMARY KEY (incarnation, key)
);
