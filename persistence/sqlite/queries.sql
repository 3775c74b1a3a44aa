-- Named queries of the SQLite backend (parameter style :name).

-- ---------------------------------------------------------------- sessions

-- name: get_session
-- One session's row, with its cooldown, by id.
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.next_seq, s.metadata, s.incarnation, s.branch_of_session, s.branch_of_seq, c.until AS cooldown_until, c.error AS cooldown_error,
       s.turn_holder, s.turn_token, s.turn_expires_at, s.live_from
FROM sessions AS s LEFT JOIN cooldowns AS c ON c.session_id = s.id
WHERE s.id = :session_id

-- name: insert_session
-- Create a session row.
INSERT INTO sessions (id, source, parent_session_id, created_at, metadata, incarnation)
VALUES (:session_id, :source, :parent_session_id, :now, :metadata, :incarnation)

-- name: end_session
-- End an open session with a reason.
UPDATE sessions SET ended_at = :now, end_reason = :reason
WHERE id = :session_id AND ended_at IS NULL

-- name: list_sessions
-- Newest first by (created_at, id); :after_created/:after_id continue after a page
-- (keyset paging); :metadata is a JSON object every key of which must match: JSON
-- equality (numbers by value, booleans apart from numbers, strings exact; null
-- matches a missing key too). :limit NULL means all.
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.next_seq, s.metadata, s.incarnation, s.branch_of_session, s.branch_of_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions AS s LEFT JOIN cooldowns AS c ON c.session_id = s.id
WHERE (:live IS NULL OR (s.ended_at IS NULL) = :live)
  AND (:source IS NULL OR s.source = :source)
  AND (:after_created IS NULL OR (s.created_at, s.id) < (:after_created, :after_id))
  AND NOT EXISTS (
      SELECT 1 FROM json_each(:metadata) AS f
      WHERE CASE f.type
          WHEN 'null' THEN EXISTS (SELECT 1 FROM json_each(s.metadata) AS m
                                   WHERE m.key = f.key AND m.type <> 'null')
          WHEN 'integer' THEN NOT EXISTS (SELECT 1 FROM json_each(s.metadata) AS m
                                          WHERE m.key = f.key AND m.type IN ('integer', 'real')
                                            AND m.atom = f.atom)
          WHEN 'real' THEN NOT EXISTS (SELECT 1 FROM json_each(s.metadata) AS m
                                       WHERE m.key = f.key AND m.type IN ('integer', 'real')
                                         AND m.atom = f.atom)
          ELSE NOT EXISTS (SELECT 1 FROM json_each(s.metadata) AS m
                           WHERE m.key = f.key AND m.type = f.type AND m.atom IS f.atom)
      END)
ORDER BY s.created_at DESC, s.id DESC
LIMIT coalesce(:limit, -1)

-- name: session_created_at
-- When a session was created (an update of its metadata checks it exists).
SELECT created_at FROM sessions WHERE id = :session_id

-- name: lock_metadata
-- A session's metadata, read for a read-modify-write patch (the write lock is held).
SELECT metadata FROM sessions WHERE id = :session_id

-- name: set_metadata
-- Store a session's patched metadata.
UPDATE sessions SET metadata = :metadata WHERE id = :session_id

-- name: lineage_ids
-- Every session of the lineage holding :session_id: up to the root, then every
-- continuation below (UNION, not UNION ALL: a hand-made cycle still ends).
WITH RECURSIVE
    up (id, parent) AS (
        SELECT id, parent_session_id FROM sessions WHERE id = :session_id
        UNION SELECT s.id, s.parent_session_id FROM sessions AS s JOIN up ON s.id = up.parent
    ),
    down (id) AS (
        SELECT id FROM up
        UNION SELECT s.id FROM sessions AS s JOIN down ON s.parent_session_id = down.id
    )
SELECT id FROM down

-- name: erase_messages
-- Erase every message of the listed sessions.
DELETE FROM messages WHERE session_id IN (SELECT value FROM json_each(:ids))

-- name: erase_compactions
-- Erase the compaction records from or into the listed sessions.
DELETE FROM compactions
WHERE session_id IN (SELECT value FROM json_each(:ids))
   OR child_session_id IN (SELECT value FROM json_each(:ids))

-- name: erase_leases
-- Erase the compaction leases of the listed sessions.
DELETE FROM leases WHERE session_id IN (SELECT value FROM json_each(:ids))

-- name: erase_cooldowns
-- Erase the cooldowns of the listed sessions.
DELETE FROM cooldowns WHERE session_id IN (SELECT value FROM json_each(:ids))

-- name: erase_sessions
-- Erase the listed sessions' rows (last: every row naming them is gone).
DELETE FROM sessions WHERE id IN (SELECT value FROM json_each(:ids))

-- name: children
-- The sessions whose parent is this one, oldest first, as session rows.
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.next_seq, s.metadata, s.incarnation, s.branch_of_session, s.branch_of_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions AS s LEFT JOIN cooldowns AS c ON c.session_id = s.id
WHERE s.parent_session_id = :session_id
ORDER BY s.created_at, s.rowid

-- name: child_ids
-- The ids of a session's children, oldest first (a lineage walk).
SELECT id FROM sessions WHERE parent_session_id = :session_id ORDER BY created_at, rowid

-- name: advance_next_seq
-- Reserve seqs for a commit's inserts, returning the first.
UPDATE sessions SET next_seq = next_seq + :count WHERE id = :session_id
RETURNING next_seq - :count AS first_seq

-- name: bump_epoch
-- Count a compaction of a session, returning its new epoch.
UPDATE sessions SET epoch = epoch + 1 WHERE id = :session_id
RETURNING *, CASE WHEN turn_holder IS NOT NULL THEN turn_token END AS held_turn

-- ---------------------------------------------------------------- messages

-- name: live_messages
-- Live rows sit at or above the session's live_from: a range of the unique index.
SELECT * FROM messages
WHERE session_id = :session_id AND state = 'live'
  AND seq >= (SELECT live_from FROM sessions WHERE id = :session_id)
ORDER BY seq

-- name: latest_live
-- The newest :limit live rows, newest first (the caller reverses them): read from
-- the end of the same range, so they cost :limit rows whatever the transcript's length.
SELECT * FROM messages
WHERE session_id = :session_id AND state = 'live'
  AND seq >= (SELECT live_from FROM sessions WHERE id = :session_id)
ORDER BY seq DESC LIMIT :limit

-- name: archived_messages
-- A session's archived rows (compacted, superseded, retracted), in seq order.
SELECT * FROM messages WHERE session_id = :session_id AND state <> 'live' ORDER BY seq

-- name: turn_in_snapshot
-- A live row up to the watermark appended under the open turn (:turn, its lease
-- token): the snapshot reaches into the turn.
SELECT 1 FROM messages
WHERE session_id = :session_id AND state = 'live' AND seq <= :watermark AND turn = :turn
  AND seq >= (SELECT live_from FROM sessions WHERE id = :session_id)
LIMIT 1

-- name: archive_compacted
-- Archive the live rows at or below the watermark as compacted.
UPDATE messages SET state = 'compacted', archived_at = :now
WHERE session_id = :session_id AND state = 'live' AND seq <= :watermark
  AND seq >= (SELECT live_from FROM sessions WHERE id = :session_id)

-- name: verbatim_originals
-- The rows this compaction archived (compacted, seqs :replaced_from to :watermark)
-- whose text is one of :contents (a JSON array): a summary row that repeats one of
-- them verbatim is written as its copy (persistence.sql._compaction).
SELECT id, role, content, name, tool_call_id, tool_calls, meta FROM messages
WHERE session_id = :session_id AND state = 'compacted' AND seq BETWEEN :replaced_from AND :watermark
  AND content IN (SELECT value FROM json_each(:contents))
ORDER BY seq

-- name: supersede_tail
-- Archive the live rows above the watermark as superseded (the tail is copied).
UPDATE messages SET state = 'superseded', archived_at = :now
WHERE session_id = :session_id AND state = 'live' AND seq > :watermark
RETURNING *

-- name: close_live_range
-- A compaction commit, once it archived every live row of the session: no row
-- below next_seq is live any more (the compacted and copied rows come after).
UPDATE sessions SET live_from = next_seq WHERE id = :session_id

-- name: watermark_state
-- Inside a compaction commit: is the snapshot's last message still there?
SELECT state FROM messages WHERE session_id = :session_id AND seq = :watermark

-- name: retract_last
-- Retract the newest live message of a session, in one statement; the row as it was.
UPDATE messages SET state = 'retracted', archived_at = :now
WHERE id = (SELECT id FROM messages
            WHERE session_id = :session_id AND state = 'live'
              AND seq >= (SELECT live_from FROM sessions WHERE id = :session_id)
            ORDER BY seq DESC LIMIT 1)
RETURNING id, session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
          created_at, 'live' AS state, origin_id, key, usage

-- name: prune_archive
-- Retention: archived rows that left the live transcript at or before (:now - :older_than)
-- keep only their place (id, seq, role, created_at). :ids (a JSON array) limits
-- it to some sessions; NULL means every session.
UPDATE messages
SET state = 'pruned', content = '""', name = NULL, tool_calls = NULL, meta = '{}', checksum = NULL
WHERE state IN ('compacted', 'superseded', 'retracted') AND archived_at <= (:now - :older_than)
  AND (:ids IS NULL OR session_id IN (SELECT value FROM json_each(:ids)))

-- name: idle_lineages
-- Expiry: the lineages (root id, and each session without a continuation: its tips)
-- with no activity after (:now - :idle_for). Activity: a session created, a message appended
-- (a session's last row by seq is its newest), a turn or compaction lease live now.
-- :source limits it to one source (a lineage shares its root's), :root to one lineage.
WITH RECURSIVE lineage (root, id) AS (
    SELECT id, id FROM sessions
    WHERE parent_session_id IS NULL AND (:source IS NULL OR source = :source)
      AND (:root IS NULL OR id = :root)
    UNION ALL
    SELECT l.root, s.id FROM sessions AS s JOIN lineage AS l ON s.parent_session_id = l.id
),
idle (root) AS (
    SELECT l.root FROM lineage AS l JOIN sessions AS s ON s.id = l.id
    GROUP BY l.root
    HAVING max(s.created_at) <= (:now - :idle_for)
       AND coalesce(max((SELECT m.created_at FROM messages AS m WHERE m.session_id = s.id
                         ORDER BY m.seq DESC LIMIT 1)), 0) <= (:now - :idle_for)
       AND NOT max(s.turn_holder IS NOT NULL AND s.turn_expires_at > :now)
       AND NOT max(EXISTS (SELECT 1 FROM leases AS k WHERE k.session_id = s.id
                           AND k.holder IS NOT NULL AND k.expires_at > :now))
)
SELECT l.root, l.id AS tip FROM idle JOIN lineage AS l ON l.root = idle.root
WHERE NOT EXISTS (SELECT 1 FROM sessions AS c WHERE c.parent_session_id = l.id)
ORDER BY l.root, l.id

-- ---------------------------------------------------------------- leases

-- name: acquire_lease
-- A row that is free (released or expired) or held by the same holder is taken
-- over with token + 1; a live lease of another holder matches nothing. A new row
-- starts above every erased row's token (lease_token_floor).
INSERT INTO leases (session_id, holder, token, acquired_at, expires_at)
VALUES (:session_id, :holder, (SELECT token + 1 FROM lease_token_floor), :now, :now + :ttl)
ON CONFLICT (session_id) DO UPDATE
SET holder = excluded.holder, token = leases.token + 1,
    acquired_at = excluded.acquired_at, expires_at = excluded.expires_at
WHERE leases.holder IS NULL OR leases.expires_at <= :now OR leases.holder = :holder
RETURNING session_id, holder, token, acquired_at, expires_at

-- name: renew_lease
-- Extend a live compaction lease held with this token; nothing when it is lost.
UPDATE leases SET expires_at = :now + :ttl
WHERE session_id = :session_id AND holder = :holder AND token = :token AND expires_at > :now
RETURNING session_id, holder, token, acquired_at, expires_at

-- name: release_lease
-- Give a compaction lease up (the token stays for the next holder).
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
-- A session's compaction lease, if a holder has it and it has not expired.
SELECT session_id, holder, token, acquired_at, expires_at FROM leases
WHERE session_id = :session_id AND holder IS NOT NULL AND expires_at > :now

-- name: held_leases
-- Every compaction lease that has a holder, by session id.
SELECT session_id, holder, token, acquired_at, expires_at FROM leases
WHERE holder IS NOT NULL ORDER BY session_id

-- ---------------------------------------------------------------- cooldowns

-- name: get_cooldown
-- A session's cooldown row, if any.
SELECT session_id, until, error FROM cooldowns WHERE session_id = :session_id

-- name: arm_cooldown
-- merge-max: the later deadline wins, and brings its error with it
INSERT INTO cooldowns (session_id, until, error) VALUES (:session_id, :now + :seconds, :error)
ON CONFLICT (session_id) DO UPDATE
SET error = CASE WHEN excluded.until > cooldowns.until THEN excluded.error ELSE cooldowns.error END,
    until = max(cooldowns.until, excluded.until)
RETURNING session_id, until, error

-- name: put_cooldown
-- Set a session's cooldown to exactly this deadline and error (a restore).
INSERT INTO cooldowns (session_id, until, error) VALUES (:session_id, :until, :error)
ON CONFLICT (session_id) DO UPDATE SET until = excluded.until, error = excluded.error

-- name: delete_cooldown
-- Clear a session's cooldown.
DELETE FROM cooldowns WHERE session_id = :session_id

-- ---------------------------------------------------------------- compactions

-- name: insert_compaction
-- Record a committed compaction.
INSERT INTO compactions (session_id, child_session_id, mode, token, holder, watermark,
                         archived_count, tail_count, compressor, started_at, committed_at,
                         replaced_from, written_from, summary_count, usage)
VALUES (:session_id, :child_session_id, :mode, :token, :holder, :watermark,
        :archived_count, :tail_count, :compressor, :started_at, :now,
        :replaced_from, :written_from, :summary_count, :usage)
RETURNING *

-- name: compactions
-- A session's compaction records, oldest first.
SELECT * FROM compactions WHERE session_id = :session_id ORDER BY id

-- ---------------------------------------------------------------- turns

-- name: open_turn
-- Taken when the lease is free (closed or sealed) or live and already this holder's
-- (a lease its registry lost track of); another holder's live lease matches nothing,
-- and so does a dead one (lapsed while held: seal_turn first), whoever asks.
UPDATE sessions
SET turn_holder = :holder, turn_token = :token, turn_expires_at = :now + :ttl, turn_interrupted = 0
WHERE id = :session_id AND ended_at IS NULL AND coalesce(:incarnation = incarnation, 1)
  AND (turn_holder IS NULL OR (turn_holder = :holder AND turn_expires_at > :now))
RETURNING id, turn_holder, turn_token, turn_expires_at, turn_interrupted

-- name: turn_of
-- A session's turn columns, for a verdict on a refused write.
SELECT id, ended_at, incarnation, turn_holder, turn_token, turn_expires_at, turn_interrupted,
       turn_holder IS NOT NULL AND turn_expires_at > :now AS turn_live
FROM sessions WHERE id = :session_id

-- name: renew_turn
-- Matched by token (unique in the store) on the live session that carries it.
UPDATE sessions SET turn_expires_at = :now + :ttl
WHERE turn_token = :token AND turn_holder = :holder AND ended_at IS NULL AND turn_expires_at > :now
RETURNING id, turn_holder, turn_token, turn_expires_at, turn_interrupted

-- name: close_turn
-- Close a turn held with this token: the holder clears, the token stays.
UPDATE sessions SET turn_holder = NULL, turn_expires_at = min(turn_expires_at, :now), turn_interrupted = 0
WHERE turn_token = :token AND turn_holder = :holder AND ended_at IS NULL
RETURNING id

-- name: interrupt_turn
-- Ask the live turn of a session to stop, returning its token.
UPDATE sessions SET turn_interrupted = 1
WHERE id = :session_id AND turn_holder IS NOT NULL AND turn_expires_at > :now
RETURNING turn_token

-- name: roll_back_turn
-- The rows of turn :token still at the end of the live transcript leave it
-- (retracted, archived), as a retract of each would.
UPDATE messages SET state = 'retracted', archived_at = :now
WHERE session_id = :session_id AND state = 'live' AND turn = :token
  AND seq >= (SELECT live_from FROM sessions WHERE id = :session_id)
  AND seq > coalesce((SELECT max(o.seq) FROM messages AS o
                      WHERE o.session_id = :session_id AND o.state = 'live' AND o.turn IS NOT :token
                        AND o.seq >= (SELECT live_from FROM sessions WHERE id = :session_id)), 0)

-- name: turn_first_seq
-- The first live row appended under token :token (NULL before the turn appended),
-- and the turn's key (NULL: none).
SELECT min(m.seq) AS first_seq, (SELECT k.key FROM turn_keys AS k WHERE k.token = :token) AS key
FROM messages AS m
WHERE m.session_id = :session_id AND m.state = 'live' AND m.turn = :token
  AND m.seq >= (SELECT live_from FROM sessions WHERE id = :session_id)

-- name: live_turns
-- Every session with a live turn (a holder, not expired, not ended).
SELECT id, turn_holder, turn_token, turn_expires_at, turn_interrupted FROM sessions
WHERE turn_token IS NOT NULL AND turn_holder IS NOT NULL AND turn_expires_at > :now
  AND ended_at IS NULL AND (:holder IS NULL OR turn_holder = :holder)
ORDER BY id

-- name: interrupted_turns
-- The live turns of a holder that were asked to stop.
SELECT id, turn_holder, turn_token, turn_expires_at, turn_interrupted FROM sessions
WHERE turn_holder = :holder AND turn_interrupted = 1 AND ended_at IS NULL

-- name: claim_key
-- Claim an idempotency key for an incarnation (nothing when it is taken).
INSERT INTO message_keys (incarnation, key) VALUES (:incarnation, :key)
ON CONFLICT DO NOTHING

-- name: keyed_row
-- The stored row carrying :key in the conversation :incarnation, live first.
SELECT m.* FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.key = :key AND s.incarnation = :incarnation
ORDER BY m.state = 'live' DESC, m.id
LIMIT 1

-- name: rows_by_id
-- Message rows by id, in id order.
SELECT * FROM messages WHERE id IN (SELECT value FROM json_each(:ids)) ORDER BY id

-- name: erase_keys
-- Erase the idempotency keys of the listed sessions' incarnations.
DELETE FROM message_keys
WHERE incarnation IN (SELECT s.incarnation FROM sessions AS s WHERE s.id IN (SELECT value FROM json_each(:ids)))

-- name: erase_turn_keys
-- Erase the turn keys of the listed sessions' incarnations.
DELETE FROM turn_keys
WHERE incarnation IN (SELECT s.incarnation FROM sessions AS s WHERE s.id IN (SELECT value FROM json_each(:ids)))

-- ---------------------------------------------------------------- sealing and keyed turns

-- name: turn_carrier
-- The live session carrying the turn lease :token of :holder (NULL: any holder, a
-- held lease), with its turn columns. live: only while the lease is live.
SELECT id, ended_at, incarnation, turn_holder, turn_token, turn_expires_at, turn_interrupted,
       turn_expires_at > :now AS turn_live
FROM sessions
WHERE turn_token = :token AND ended_at IS NULL
  AND (turn_holder = :holder OR (:holder IS NULL AND turn_holder IS NOT NULL))
  AND (NOT :live OR turn_expires_at > :now)

-- name: lock_turn_carrier
-- seal_turn with a lease: the live session carrying it (the write lock orders it).
SELECT id FROM sessions
WHERE turn_token = :token AND turn_holder = :holder AND ended_at IS NULL

-- name: turn_transcript
-- The live transcript with the turn each row was appended under (seal_turn).
SELECT * FROM messages
WHERE session_id = :session_id AND state = 'live'
  AND seq >= (SELECT live_from FROM sessions WHERE id = :session_id)
ORDER BY seq

-- name: retract_rows
-- seal_turn: the rows :ids (a JSON array) leave the live transcript as a retract
-- takes each (retracted, archived, their seqs kept).
UPDATE messages SET state = 'retracted', archived_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND state = 'live'

-- name: seal_turn
-- The dead (or given up) turn :token ends: the lease is released, its token kept.
UPDATE sessions SET turn_holder = NULL, turn_expires_at = min(turn_expires_at, :now), turn_interrupted = 0
WHERE id = :session_id AND turn_token = :token AND turn_holder IS NOT NULL

-- name: turn_key
-- The token and state of a turn's key.
SELECT token, state FROM turn_keys WHERE incarnation = :incarnation AND key = :key

-- name: claim_turn_key
-- The key names the turn just opened (a new key, or one whose turn was sealed or
-- dropped: :seen, the token it named when read, NULL for none).
INSERT INTO turn_keys (incarnation, key, token, state, opened_at)
VALUES (:incarnation, :key, :token, 'open', :now)
ON CONFLICT (incarnation, key) DO UPDATE
SET token = excluded.token, state = 'open', opened_at = excluded.opened_at
WHERE turn_keys.token = :seen

-- name: turn_key_open
-- Whether a turn's token names an open keyed turn: its close completes the key, so it is durable.
SELECT 1 AS keyed FROM turn_keys WHERE token = :token AND state = 'open'

-- name: complete_turn_key
-- Mark a turn's key completed when the turn closes.
UPDATE turn_keys SET state = 'completed' WHERE token = :token AND state = 'open'

-- name: seal_turn_key
-- Mark a turn's key sealed when its turn is sealed.
UPDATE turn_keys SET state = 'sealed' WHERE token = :token AND state = 'open'

-- name: turn_replay
-- The messages a completed turn :token stored in the lineage of :session_id, in the
-- order appended: each original (origin_id NULL), as its newest copy when that is
-- live (a compaction carried it), else as the original (a summary replaced it); one
-- retracted (the original, or its newest copy) is left out.
WITH RECURSIVE
    up (id, parent) AS (
        SELECT id, parent_session_id FROM sessions WHERE id = :session_id
        UNION SELECT s.id, s.parent_session_id FROM sessions AS s JOIN up ON s.id = up.parent
    ),
    lineage (id) AS (
        SELECT id FROM up
        UNION SELECT s.id FROM sessions AS s JOIN lineage ON s.parent_session_id = lineage.id
    ),
    chain (original, id, depth) AS (
        SELECT m.id, m.id, 0 FROM messages AS m
        WHERE m.session_id IN (SELECT id FROM lineage) AND m.turn = :token AND m.origin_id IS NULL
        UNION ALL
        SELECT c.original, n.id, c.depth + 1 FROM chain AS c JOIN messages AS n ON n.origin_id = c.id
    ),
    newest AS (
        SELECT original, id, row_number() OVER (PARTITION BY original ORDER BY depth DESC) AS rank FROM chain
    )
SELECT m.* FROM newest
JOIN messages AS n ON n.id = newest.id
JOIN messages AS m ON m.id = CASE WHEN n.state = 'live' THEN n.id ELSE newest.original END
WHERE newest.rank = 1 AND n.state <> 'retracted'
ORDER BY newest.original
