-- The statements only SQLite runs (each with why PostgreSQL has no twin in
-- tests/persistence/test_queries.py): queries.sql and recall.sql name alike in both dialects.

-- name: first_taken
-- create_sessions: the first of :ids (a JSON array) that names a session already.
SELECT s.id FROM json_each(:ids) AS wanted JOIN sessions AS s ON s.id = wanted.value
ORDER BY wanted.key LIMIT 1

-- name: sessions_by_id
-- New sessions (create_sessions): no cooldown yet.
SELECT *, NULL AS cooldown_until, NULL AS cooldown_error
FROM sessions WHERE id IN (SELECT value FROM json_each(:ids))

-- name: mark_branch
-- Record where a branch was taken from.
UPDATE sessions SET branch_of_session = :branch_of, branch_of_seq = :at_seq WHERE id = :session_id

-- name: advance_live_next_seq
-- The append fast path: matches nothing for an unknown or ended session, for
-- another incarnation than the writer's (:incarnation NULL: any), nor while the
-- session holds a turn (:turn, the token the append carries, NULL: none; an append
-- carrying a token needs that lease live). A turn whose lease lapsed while held
-- (dead, until sealed) admits nobody.
UPDATE sessions SET next_seq = next_seq + :count
WHERE id = :session_id AND ended_at IS NULL AND coalesce(:incarnation = incarnation, 1)
  AND CASE WHEN :turn IS NULL THEN turn_holder IS NULL
           ELSE coalesce(turn_token = :turn, 0) AND turn_holder IS NOT NULL AND turn_expires_at > :now END
RETURNING next_seq - :count AS first_seq

-- name: live_next_seqs
-- Group commit: the seq counters of the live sessions among :ids (a JSON object
-- {id: expected incarnation, or null for any}) whose incarnation matches, as one
-- JSON object {id: next_seq}: one step for the whole batch.
-- A session holding a turn the appends do not carry live is left out (:turns: {id:
-- the token its appends carry}; a dead turn admits nobody).
SELECT json_group_object(s.id, s.next_seq) AS next_seqs
FROM json_each(:ids) AS wanted JOIN sessions AS s ON s.id = wanted.key
WHERE s.ended_at IS NULL AND coalesce(wanted.value = s.incarnation, 1)
  AND coalesce((SELECT coalesce(s.turn_token = t.value, 0) AND s.turn_holder IS NOT NULL AND s.turn_expires_at > :now
                 FROM json_each(:turns) AS t WHERE t.key = s.id),
                s.turn_holder IS NULL)

-- name: insert_messages_head
-- Group commit: many rows in one statement; the writer repeats insert_messages_row,
-- comma-separated, once per row (positional parameters, in this order).
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, turn, usage, checksum, state, origin_id)
VALUES

-- name: insert_messages_row
-- One row's placeholders of a group-commit INSERT (repeated after its head).
(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'live', NULL)

-- name: insert_checked_messages_head
-- Group commit, counters the writer remembers: the same rows (insert_messages_row
-- repeated, then insert_checked_messages_tail), inserted only if each session of ?2
-- (a JSON object: {id: n} for any incarnation, {id: "n incarnation"} for that one)
-- is live, of the incarnation meant and at the seq remembered; ?1 is the number of
-- ids, and none holds a turn its appends do not carry live (?3: {id: the token its
-- appends carry}; ?4: now; a dead turn admits nobody). Nothing is inserted otherwise. The check is
-- materialized once, before the first row moves a counter (the trigger
-- messages_next_seq).
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, turn, usage, checksum, state, origin_id)
WITH checked AS MATERIALIZED (
    SELECT count(*) = ?1 AS ok
    FROM json_each(?2) AS e JOIN sessions AS s ON s.id = e.key
    WHERE s.ended_at IS NULL
      AND CASE e.type WHEN 'integer' THEN s.next_seq = e.value
                      ELSE s.next_seq || ' ' || s.incarnation = e.value END
      AND coalesce((SELECT coalesce(s.turn_token = t.value, 0) AND s.turn_holder IS NOT NULL
                           AND s.turn_expires_at > ?4
                    FROM json_each(?3) AS t WHERE t.key = s.id),
                   s.turn_holder IS NULL))
SELECT v.* FROM checked, (VALUES

-- name: insert_checked_messages_tail
-- The end of a checked group-commit INSERT (only rows whose checks passed).
) AS v WHERE checked.ok

-- name: insert_message
-- Insert one message row.
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, state, origin_id, turn, key, usage, checksum)
VALUES (:session_id, :seq, :role, :content, :name, :tool_call_id, :tool_calls,
        :meta, :now, 'live', :origin_id, :turn, :key, :usage, :checksum)

-- name: checksummed_rows
-- fsck: every row with a checksum, its columns' stored bytes in checksum order.
SELECT session_id, seq, checksum, CAST(role AS BLOB), CAST(content AS BLOB), CAST(name AS BLOB),
       CAST(tool_call_id AS BLOB), CAST(tool_calls AS BLOB), CAST(meta AS BLOB)
FROM messages WHERE checksum IS NOT NULL

-- name: next_turn_token
-- The next turn token, from the counters table.
UPDATE counters SET value = value + 1 WHERE name = 'turn_token' RETURNING value AS token

-- name: fence_turn_tokens
-- Move the turn token counter 2^20 ahead, durably, before a store's first turn opens:
-- an open committed without fsync and lost in an OS crash drew a token below it.
UPDATE counters SET value = value + 1048576 WHERE name = 'turn_token'

-- name: carry_turn
-- A rotation: the continuation carries its parent's turn lease (a dead one too: it
-- is sealed there, on the copies of its rows).
UPDATE sessions
SET (turn_holder, turn_token, turn_expires_at, turn_interrupted) =
    (SELECT turn_holder, turn_token, turn_expires_at, turn_interrupted FROM sessions WHERE id = :parent_id)
WHERE id = :child_id

-- name: search_archive_in
-- search_archive within the sessions :ids (a JSON array): their archived rows
-- first, each looked up in the index by rowid (CROSS JOIN keeps that order), so a
-- lineage's search costs its rows, not every match in the database.
SELECT m.session_id, m.seq, m.role, m.state,
       snippet(message_search, 0, '[', ']', '…', 16) AS snippet,
       bm25(message_search) AS rank
FROM messages AS m
CROSS JOIN message_search
JOIN sessions AS s ON s.id = m.session_id
WHERE m.session_id IN (SELECT value FROM json_each(:ids))
  AND m.state IN ('compacted', 'superseded')
  AND message_search.rowid = m.id
  AND message_search MATCH :query
  AND (:source IS NULL OR s.source = :source)
  AND NOT EXISTS (SELECT 1 FROM messages AS c JOIN sessions AS cs ON cs.id = c.session_id
                  WHERE c.origin_id = m.id AND cs.incarnation = s.incarnation)
ORDER BY rank, m.id
LIMIT :limit
