-- session-actors PostgreSQL schema, version 4: an append writes fewer indexes.
-- live_from: no message of the session below this seq is live. A compaction
-- archives every live row of its session, so it moves live_from to next_seq;
-- appends take seqs from next_seq on; a row never becomes live again. Transcript
-- reads then range-scan messages_session_seq_unique from live_from, and the
-- partial index of live rows, which every append had to insert into, goes.
-- Erasure's foreign-key look-ups of tail copies only ever ask for a non-NULL
-- origin_id: the origin index keeps those rows alone (appends have none).

ALTER TABLE sessions ADD COLUMN live_from bigint NOT NULL DEFAULT 1;
ALTER TABLE sessions ADD CONSTRAINT sessions_live_from_positive CHECK (live_from >= 1);

-- existing sessions: their lowest live seq (the old index serves this look-up)
UPDATE sessions AS s SET live_from = coalesce(
    (SELECT min(m.seq) FROM messages AS m WHERE m.session_id = s.id AND m.state = 'live'),
    s.next_seq);

DROP INDEX messages_live_idx;
DROP INDEX messages_origin_idx;
CREATE INDEX messages_origin_idx ON messages (origin_id) WHERE origin_id IS NOT NULL;
