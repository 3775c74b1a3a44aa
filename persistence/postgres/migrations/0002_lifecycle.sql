-- session-actors PostgreSQL schema, version 2: the data lifecycle.
-- Sessions get application metadata (a jsonb object: equality as JSON values).
-- Messages get the "developer" role, the "retracted" and "pruned" states, and
-- archived_at: when the row left the live transcript (retention counts from there).

ALTER TABLE sessions ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE sessions ADD CONSTRAINT sessions_metadata_object CHECK (jsonb_typeof(metadata) = 'object');

ALTER TABLE messages ADD COLUMN archived_at double precision;
ALTER TABLE messages DROP CONSTRAINT messages_role_valid;
ALTER TABLE messages ADD CONSTRAINT messages_role_valid
    CHECK (role IN ('system', 'developer', 'user', 'assistant', 'tool'));
ALTER TABLE messages DROP CONSTRAINT messages_state_valid;
ALTER TABLE messages ADD CONSTRAINT messages_state_valid
    CHECK (state IN ('live', 'compacted', 'superseded', 'retracted', 'pruned'));

-- erasure deletes rows that tail copies point at: the foreign key check needs
-- this index (and so does the copy look-up below)
CREATE INDEX messages_origin_idx ON messages (origin_id);

-- Wave-1 archives: a superseded row left when its copy was written; a compacted
-- row left at the first compaction of its session whose watermark covered it.
-- Exact, because wave 1 archived rows only through compactions.
UPDATE messages AS m
SET archived_at = coalesce(
    CASE m.state
        WHEN 'superseded' THEN (SELECT min(c.created_at) FROM messages AS c WHERE c.origin_id = m.id)
        ELSE (SELECT min(k.committed_at) FROM compactions AS k
              WHERE k.session_id = m.session_id AND k.watermark >= m.seq)
    END,
    extract(epoch FROM clock_timestamp())::double precision)  -- unknown: count from the upgrade
WHERE m.state <> 'live';
ALTER TABLE messages ADD CONSTRAINT messages_archived_iff_not_live
    CHECK ((state = 'live') = (archived_at IS NULL));

CREATE INDEX messages_archived_idx ON messages (archived_at)
    WHERE state IN ('compacted', 'superseded', 'retracted');
