-- Named queries of the SQLite backend (parameter style :name).

-- name: create_schema_version
CREATE TABLE IF NOT EXISTS schema_version (
    version    INTEGER PRIMARY KEY,
    applied_at REAL NOT NULL
)

-- name: schema_version_present
SELECT count(*) AS present FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'

-- name: schema_version
SELECT coalesce(max(version), 0) AS version FROM schema_version

-- name: record_migration
INSERT INTO schema_version (version, applied_at) VALUES (:version, :now)

-- ---------------------------------------------------------------- sessions

-- name: get_session
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.next_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions AS s LEFT JOIN cooldowns AS c ON c.session_id = s.id
WHERE s.id = :session_id

-- name: insert_session
INSERT INTO sessions (id, source, parent_session_id, created_at)
VALUES (:session_id, :source, :parent_session_id, :now)

-- name: end_session
UPDATE sessions SET ended_at = :now, end_reason = :reason
WHERE id = :session_id AND ended_at IS NULL

-- name: list_sessions
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.next_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions AS s LEFT JOIN cooldowns AS c ON c.session_id = s.id
WHERE :live IS NULL OR (s.ended_at IS NULL) = :live
ORDER BY s.created_at DESC, s.rowid DESC
LIMIT :limit

-- name: children
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.next_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions AS s LEFT JOIN cooldowns AS c ON c.session_id = s.id
WHERE s.parent_session_id = :session_id
ORDER BY s.created_at, s.rowid

-- name: child_ids
SELECT id FROM sessions WHERE parent_session_id = :session_id ORDER BY created_at, rowid

-- name: advance_next_seq
UPDATE sessions SET next_seq = next_seq + :count WHERE id = :session_id
RETURNING next_seq - :count AS first_seq

-- name: advance_live_next_seq
-- The append fast path: matches nothing for an unknown or ended session.
UPDATE sessions SET next_seq = next_seq + :count WHERE id = :session_id AND ended_at IS NULL
RETURNING next_seq - :count AS first_seq

-- name: live_next_seqs
-- Group commit: the seq counters of the live sessions among :ids (a JSON array),
-- as one JSON object {id: next_seq}: one step for the whole batch.
SELECT json_group_object(id, next_seq) AS next_seqs FROM sessions
WHERE id IN (SELECT value FROM json_each(:ids)) AND ended_at IS NULL

-- name: set_next_seqs
-- Group commit: move every counter of the batch at once (:next_seqs: {id: next_seq}).
UPDATE sessions SET next_seq = counters.value
FROM json_each(:next_seqs) AS counters WHERE sessions.id = counters.key

-- name: insert_messages_head
-- Group commit: many rows in one statement; the writer repeats insert_messages_row,
-- comma-separated, once per row (positional parameters, in this order).
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, state, origin_id)
VALUES

-- name: insert_messages_row
(?, ?, ?, ?, ?, ?, ?, ?, ?, 'live', NULL)

-- name: bump_epoch
UPDATE sessions SET epoch = epoch + 1 WHERE id = :session_id RETURNING epoch

-- ---------------------------------------------------------------- messages

-- name: insert_message
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, state, origin_id)
VALUES (:session_id, :seq, :role, :content, :name, :tool_call_id, :tool_calls,
        :meta, :now, 'live', :origin_id)

-- name: transcript
SELECT * FROM messages WHERE session_id = :session_id AND state = 'live' ORDER BY seq

-- name: archive
SELECT * FROM messages WHERE session_id = :session_id AND state <> 'live' ORDER BY seq

-- name: mark_compacted
UPDATE messages SET state = 'compacted'
WHERE session_id = :session_id AND state = 'live' AND seq <= :watermark

-- name: mark_superseded
UPDATE messages SET state = 'superseded'
WHERE session_id = :session_id AND state = 'live' AND seq > :watermark

-- ---------------------------------------------------------------- leases

-- name: acquire_lease
-- A row that is free (released or expired) or held by the same holder is taken
-- over with token + 1; a live lease of another holder matches nothing.
INSERT INTO leases (session_id, holder, token, acquired_at, expires_at)
VALUES (:session_id, :holder, 1, :now, :expires_at)
ON CONFLICT (session_id) DO UPDATE
SET holder = excluded.holder, token = leases.token + 1,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
WHERE leases.holder IS NULL OR leases.expires_at <= :now OR leases.holder = :holder
RETURNING session_id, holder, token, acquired_at, expires_at

-- name: renew_lease
UPDATE leases SET expires_at = :expires_at
WHERE session_id = :session_id AND holder = :holder AND token = :token AND expires_at > :now
RETURNING session_id, holder, token, acquired_at, expires_at

-- name: release_lease
UPDATE leases SET holder = NULL, expires_at = min(expires_at, :now)
WHERE session_id = :session_id AND holder = :holder AND token = :token

-- name: reap_leases
-- Expired leases are garbage a crash left: clear the holder, keep the token (the
-- next acquire continues from it) and leave live leases alone.
UPDATE leases SET holder = NULL
WHERE holder IS NOT NULL AND expires_at <= :now

-- name: fence_lease
-- The fencing check of a compaction commit: the first write of its transaction.
UPDATE leases SET expires_at = expires_at
WHERE session_id = :session_id AND holder = :holder AND token = :token AND expires_at > :now
RETURNING acquired_at

-- name: current_lease
SELECT session_id, holder, token, acquired_at, expires_at FROM leases
WHERE session_id = :session_id AND holder IS NOT NULL AND expires_at > :now

-- name: held_leases
SELECT session_id, holder, token, acquired_at, expires_at FROM leases
WHERE holder IS NOT NULL ORDER BY session_id

-- ---------------------------------------------------------------- cooldowns

-- name: get_cooldown
SELECT session_id, until, error FROM cooldowns WHERE session_id = :session_id

-- name: arm_cooldown
-- merge-max: the later deadline wins, and brings its error with it
INSERT INTO cooldowns (session_id, until, error) VALUES (:session_id, :until, :error)
ON CONFLICT (session_id) DO UPDATE
SET error = CASE WHEN excluded.until > cooldowns.until THEN excluded.error ELSE cooldowns.error END,
    until = max(cooldowns.until, excluded.until)
RETURNING session_id, until, error

-- name: put_cooldown
INSERT INTO cooldowns (session_id, until, error) VALUES (:session_id, :until, :error)
ON CONFLICT (session_id) DO UPDATE SET until = excluded.until, error = excluded.error

-- name: delete_cooldown
DELETE FROM cooldowns WHERE session_id = :session_id

-- ---------------------------------------------------------------- compactions

-- name: insert_compaction
INSERT INTO compactions (session_id, child_session_id, mode, token, holder, watermark,
                         archived_count, tail_count, compressor, started_at, committed_at)
VALUES (:session_id, :child_session_id, :mode, :token, :holder, :watermark,
        :archived_count, :tail_count, :compressor, :started_at, :now)
RETURNING *

-- name: compactions
SELECT * FROM compactions WHERE session_id = :session_id ORDER BY id
