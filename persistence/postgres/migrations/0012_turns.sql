-- session-actors PostgreSQL schema, version 12: keyed turns.
--
-- A turn may carry an idempotency key, unique per conversation (the incarnation a
-- lineage's sessions share, as message_keys): a request retried after its turn
-- completed answers with what that turn stored instead of running again. A row
-- names the turn its key opened last (its token) and what became of it: 'open'
-- while it runs (or lies dead), 'completed' once its holder closed it (the key then
-- replays it), 'sealed' once seal_turn ended it (the key opens a fresh turn). Two
-- transactions opening one key meet at its primary key: the second waits for the
-- first, then finds the key taken. Erasure deletes a lineage's rows with it.
CREATE TABLE turn_keys (
    incarnation text NOT NULL,
    key         text NOT NULL,
    token       bigint NOT NULL,
    state       text NOT NULL DEFAULT 'open',
    opened_at   double precision NOT NULL,
    CONSTRAINT turn_keys_pkey PRIMARY KEY (incarnation, key),
    CONSTRAINT turn_keys_state_valid CHECK (state IN ('open', 'completed', 'sealed'))
);
-- close_turn and seal_turn find a turn's key by its token (one sequence: unique)
CREATE INDEX turn_keys_token_idx ON turn_keys (token);
