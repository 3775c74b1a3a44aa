-- session-actors schema, version 1 (SQLite).
-- Times are REAL epoch seconds from the store's clock. JSON columns hold text.

CREATE TABLE sessions (
    id                TEXT PRIMARY KEY,
    source            TEXT NOT NULL,
    parent_session_id TEXT REFERENCES sessions (id),
    created_at        REAL NOT NULL,
    ended_at          REAL,
    end_reason        TEXT,
    epoch             INTEGER NOT NULL DEFAULT 0,
    -- the seq the next appended row gets: seqs are assigned from here under
    -- the write lock, so they have no gaps and follow commit order
    next_seq          INTEGER NOT NULL DEFAULT 1,
    CONSTRAINT sessions_end_consistent CHECK ((ended_at IS NULL) = (end_reason IS NULL))
);
CREATE INDEX sessions_parent_idx ON sessions (parent_session_id);
CREATE INDEX sessions_created_idx ON sessions (created_at);

CREATE TABLE messages (
    -- AUTOINCREMENT: ids strictly increase store-wide and are never reused
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id   TEXT NOT NULL REFERENCES sessions (id),
    seq          INTEGER NOT NULL,
    role         TEXT NOT NULL,
    content      TEXT NOT NULL,
    name         TEXT,
    tool_call_id TEXT,
    tool_calls   TEXT,
    meta         TEXT NOT NULL DEFAULT '{}',
    created_at   REAL NOT NULL,
    state        TEXT NOT NULL DEFAULT 'live',
    origin_id    INTEGER REFERENCES messages (id),
    CONSTRAINT messages_session_seq_unique UNIQUE (session_id, seq),
    CONSTRAINT messages_role_valid CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    CONSTRAINT messages_state_valid CHECK (state IN ('live', 'compacted', 'superseded')),
    CONSTRAINT messages_content_json CHECK (json_valid(content)),
    CONSTRAINT messages_seq_positive CHECK (seq >= 1)
);
CREATE INDEX messages_session_state_idx ON messages (session_id, state, seq);

CREATE TABLE leases (
    session_id  TEXT PRIMARY KEY REFERENCES sessions (id),
    holder      TEXT,             -- NULL once released
    token       INTEGER NOT NULL, -- strictly increasing, never reset
    acquired_at REAL NOT NULL,
    expires_at  REAL NOT NULL
);

CREATE TABLE cooldowns (
    session_id TEXT PRIMARY KEY REFERENCES sessions (id),
    until      REAL NOT NULL,
    error      TEXT
);

CREATE TABLE compactions (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id       TEXT NOT NULL REFERENCES sessions (id),
    child_session_id TEXT REFERENCES sessions (id),
    mode             TEXT NOT NULL,
    token            INTEGER NOT NULL,
    holder           TEXT NOT NULL,
    watermark        INTEGER NOT NULL,
    archived_count   INTEGER NOT NULL,
    tail_count       INTEGER NOT NULL,
    compressor       TEXT NOT NULL,
    started_at       REAL NOT NULL,
    committed_at     REAL NOT NULL,
    CONSTRAINT compactions_mode_valid CHECK (mode IN ('in_place', 'rotate'))
);
CREATE INDEX compactions_session_idx ON compactions (session_id, id);
