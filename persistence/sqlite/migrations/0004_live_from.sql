-- session-actors schema, version 4 (SQLite): an append writes one per-session index.
-- live_from: no message of the session below this seq is live. A compaction
-- archives every live row of its session, so it moves live_from to next_seq;
-- appends take seqs from next_seq on; a row never becomes live again. Transcript
-- reads then range-scan messages_session_seq_unique from live_from instead of
-- keeping a second per-session index, (session_id, state, seq), which cost every
-- append a B-tree insert and a dirty page of its own in each commit.

ALTER TABLE sessions ADD COLUMN live_from INTEGER NOT NULL DEFAULT 1
    CONSTRAINT sessions_live_from_positive CHECK (live_from >= 1);

-- existing sessions: their lowest live seq (the old index serves this look-up)
UPDATE sessions SET live_from = coalesce(
    (SELECT min(m.seq) FROM messages AS m WHERE m.session_id = sessions.id AND m.state = 'live'),
    next_seq);

DROP INDEX messages_session_state_idx;
