-- session-actors schema, version 2 (SQLite): the data lifecycle.
-- Sessions get application metadata (a JSON object). Messages get the
-- "developer" role, the "retracted" and "pruned" states, and archived_at: when
-- the row left the live transcript (retention counts from there). SQLite cannot
-- change a CHECK constraint in place, so the messages table is rebuilt; ids,
-- seqs and the AUTOINCREMENT counter are kept as they were.

ALTER TABLE sessions ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'
    CONSTRAINT sessions_metadata_object CHECK (json_valid(metadata) AND json_type(metadata) = 'object');

CREATE TABLE messages_v2 (
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
    origin_id    INTEGER REFERENCES messages_v2 (id),
    -- when the row left the live transcript; NULL while live
    archived_at  REAL,
    CONSTRAINT messages_session_seq_unique UNIQUE (session_id, seq),
    CONSTRAINT messages_role_valid CHECK (role IN ('system', 'developer', 'user', 'assistant', 'tool')),
    CONSTRAINT messages_state_valid
        CHECK (state IN ('live', 'compacted', 'superseded', 'retracted', 'pruned')),
    CONSTRAINT messages_archived_iff_not_live CHECK ((state = 'live') = (archived_at IS NULL)),
    CONSTRAINT messages_content_json CHECK (json_valid(content)),
    CONSTRAINT messages_seq_positive CHECK (seq >= 1)
);

-- lets the copy look-up below use an index (dropped with the old table)
CREATE INDEX messages_origin_v1_idx ON messages (origin_id);

-- Wave-1 archives: a superseded row left when its copy was written; a compacted
-- row left at the first compaction of its session whose watermark covered it.
-- Exact, because wave 1 archived rows only through compactions.
INSERT INTO messages_v2 (id, session_id, seq, role, content, name, tool_call_id, tool_calls,
                         meta, created_at, state, origin_id, archived_at)
SELECT m.id, m.session_id, m.seq, m.role, m.content, m.name, m.tool_call_id, m.tool_calls,
       m.meta, m.created_at, m.state, m.origin_id,
       CASE m.state
           WHEN 'live' THEN NULL
           ELSE coalesce(
               CASE m.state
                   WHEN 'superseded' THEN (SELECT min(c.created_at) FROM messages AS c WHERE c.origin_id = m.id)
                   ELSE (SELECT min(k.committed_at) FROM compactions AS k
                         WHERE k.session_id = m.session_id AND k.watermark >= m.seq)
               END,
               (julianday('now') - 2440587.5) * 86400.0)  -- unknown: count from the upgrade
       END
FROM messages AS m ORDER BY m.id;

-- keep the id counter: ids are never reused, even those of erased rows
UPDATE sqlite_sequence SET seq = max(seq, (SELECT coalesce(max(s.seq), 0) FROM sqlite_sequence AS s
                                           WHERE s.name = 'messages'))
WHERE name = 'messages_v2';

DROP TABLE messages;
ALTER TABLE messages_v2 RENAME TO messages;
CREATE INDEX messages_session_state_idx ON messages (session_id, state, seq);
-- erasure deletes rows that tail copies point at: the foreign key check needs this index
CREATE INDEX messages_origin_idx ON messages (origin_id);
CREATE INDEX messages_archived_idx ON messages (archived_at);
