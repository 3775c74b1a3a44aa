-- session-actors PostgreSQL schema, version 1.
-- Every time column is double precision epoch seconds on the database clock,
-- extract(epoch FROM clock_timestamp()), the same shape as the SQLite schema.

CREATE TABLE sessions (
    id                text PRIMARY KEY,
    source            text NOT NULL,
    parent_session_id text,
    created_at        double precision NOT NULL,
    ended_at          double precision,
    end_reason        text,
    -- number of committed compactions of this session
    epoch             bigint NOT NULL DEFAULT 0,
    -- next seq to hand out; bumped under the row lock, so seqs follow commit order
    next_seq          bigint NOT NULL DEFAULT 1,
    CONSTRAINT sessions_parent_fkey FOREIGN KEY (parent_session_id) REFERENCES sessions (id),
    CONSTRAINT sessions_id_length CHECK (char_length(id) BETWEEN 1 AND 128),
    CONSTRAINT sessions_end_consistent CHECK ((ended_at IS NULL) = (end_reason IS NULL)),
    CONSTRAINT sessions_not_own_parent CHECK (parent_session_id IS DISTINCT FROM id),
    CONSTRAINT sessions_next_seq_positive CHECK (next_seq >= 1)
);
CREATE INDEX sessions_parent_idx ON sessions (parent_session_id);
CREATE INDEX sessions_created_idx ON sessions (created_at);

CREATE TABLE messages (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id   text NOT NULL,
    seq          bigint NOT NULL,
    role         text NOT NULL,
    -- JSON text: a JSON string, or a JSON array of content parts
    content      text NOT NULL,
    name         text,
    tool_call_id text,
    -- JSON text or NULL
    tool_calls   text,
    -- JSON object text
    meta         text NOT NULL DEFAULT '{}',
    created_at   double precision NOT NULL,
    state        text NOT NULL DEFAULT 'live',
    -- for a tail row carried across a compaction: the row it continues
    origin_id    bigint,
    CONSTRAINT messages_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id),
    CONSTRAINT messages_origin_fkey FOREIGN KEY (origin_id) REFERENCES messages (id),
    CONSTRAINT messages_session_seq_unique UNIQUE (session_id, seq),
    CONSTRAINT messages_seq_positive CHECK (seq >= 1),
    CONSTRAINT messages_state_valid CHECK (state IN ('live', 'compacted', 'superseded')),
    CONSTRAINT messages_role_valid CHECK (role IN ('system', 'user', 'assistant', 'tool'))
);
CREATE INDEX messages_live_idx ON messages (session_id, seq) WHERE state = 'live';

-- One row per session that ever had a lease. Released rows keep their token
-- (holder becomes NULL), so tokens strictly increase and are never reset.
CREATE TABLE leases (
    session_id  text PRIMARY KEY,
    holder      text,
    token       bigint NOT NULL,
    acquired_at double precision NOT NULL,
    expires_at  double precision NOT NULL,
    CONSTRAINT leases_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id),
    CONSTRAINT leases_token_positive CHECK (token >= 1)
);

CREATE TABLE cooldowns (
    session_id text PRIMARY KEY,
    until      double precision NOT NULL,
    error      text,
    CONSTRAINT cooldowns_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id)
);

CREATE TABLE compactions (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    session_id       text NOT NULL,
    child_session_id text,
    mode             text NOT NULL,
    token            bigint NOT NULL,
    holder           text NOT NULL,
    watermark        bigint NOT NULL,
    archived_count   bigint NOT NULL,
    tail_count       bigint NOT NULL,
    compressor       text NOT NULL,
    started_at       double precision NOT NULL,
    committed_at     double precision NOT NULL,
    CONSTRAINT compactions_session_fkey FOREIGN KEY (session_id) REFERENCES sessions (id),
    CONSTRAINT compactions_child_fkey FOREIGN KEY (child_session_id) REFERENCES sessions (id),
    CONSTRAINT compactions_mode_valid CHECK (mode IN ('in_place', 'rotate')),
    CONSTRAINT compactions_child_iff_rotate CHECK ((mode = 'rotate') = (child_session_id IS NOT NULL))
);
CREATE INDEX compactions_session_idx ON compactions (session_id, id);
