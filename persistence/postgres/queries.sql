-- Named queries of the PostgreSQL backend (psycopg placeholders).
-- Clock: coalesce(%(now)s, extract(epoch FROM clock_timestamp())). A store given a
-- clock (the testing harness's virtual one) passes it as now; otherwise now is NULL
-- and the time is the database's wall clock at the moment the expression is
-- evaluated (not now(), which is frozen at transaction start and would judge a
-- lease by a stale time after a lock wait).

-- name: insert_session
-- A continuation (parent_session_id set) shares its parent's incarnation.
INSERT INTO sessions (id, source, parent_session_id, created_at, metadata, incarnation)
VALUES (%(session_id)s, %(source)s, %(parent_session_id)s,
        coalesce(%(now)s::double precision,
                 extract(epoch FROM clock_timestamp())::double precision), %(metadata)s::jsonb,
        coalesce((SELECT incarnation FROM sessions WHERE id = %(parent_session_id)s), %(incarnation)s))
RETURNING id;

-- name: get_session
-- One session's row, with its cooldown, by id.
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.metadata, s.incarnation, s.branch_of_session, s.branch_of_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions s LEFT JOIN cooldowns c ON c.session_id = s.id
WHERE s.id = %(session_id)s;

-- name: list_sessions
-- Newest first by (created_at, id), ids compared bytewise (COLLATE "C", as on
-- SQLite); after_created/after_id continue after a page (keyset paging); metadata
-- is a jsonb object every key of which must match as a JSON value (a null matches
-- a missing key too). live: NULL for all, true for open sessions, false for ended.
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.metadata, s.incarnation, s.branch_of_session, s.branch_of_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions s LEFT JOIN cooldowns c ON c.session_id = s.id
WHERE (%(live)s::boolean IS NULL OR (s.ended_at IS NULL) = %(live)s::boolean)
  AND (%(source)s::text IS NULL OR s.source = %(source)s::text)
  AND (%(after_created)s::double precision IS NULL
       OR (s.created_at, s.id COLLATE "C")
          < (%(after_created)s::double precision, %(after_id)s::text COLLATE "C"))
  AND NOT EXISTS (
      SELECT 1 FROM jsonb_each(%(metadata)s::jsonb) AS f (key, value)
      WHERE CASE WHEN f.value = 'null'::jsonb
                 THEN coalesce(s.metadata -> f.key, 'null'::jsonb) <> 'null'::jsonb
                 ELSE (s.metadata -> f.key) IS DISTINCT FROM f.value END)
ORDER BY s.created_at DESC, s.id COLLATE "C" DESC
LIMIT %(limit)s;

-- name: session_created_at
-- When a session was created (an update of its metadata checks it exists).
SELECT created_at FROM sessions WHERE id = %(session_id)s;

-- name: lock_metadata
-- A session's metadata, locked for a read-modify-write patch.
SELECT metadata FROM sessions WHERE id = %(session_id)s FOR UPDATE;

-- name: set_metadata
-- Store a session's patched metadata.
UPDATE sessions SET metadata = %(metadata)s::jsonb WHERE id = %(session_id)s;

-- name: lineage_ids
-- Every session of the lineage holding id: up to the root, then every continuation
-- below (UNION, not UNION ALL: a hand-made cycle still ends).
WITH RECURSIVE
    up (id, parent) AS (
        SELECT id, parent_session_id FROM sessions WHERE id = %(session_id)s
        UNION SELECT s.id, s.parent_session_id FROM sessions s JOIN up ON s.id = up.parent
    ),
    down (id) AS (
        SELECT id FROM up
        UNION SELECT s.id FROM sessions s JOIN down ON s.parent_session_id = down.id
    )
SELECT id FROM down ORDER BY id;

-- name: erase_messages
-- Erase every message of the listed sessions.
DELETE FROM messages WHERE session_id = ANY(%(ids)s);

-- name: erase_compactions
-- Erase the compaction records from or into the listed sessions.
DELETE FROM compactions WHERE session_id = ANY(%(ids)s) OR child_session_id = ANY(%(ids)s);

-- name: erase_leases
-- Erase the compaction leases of the listed sessions.
DELETE FROM leases WHERE session_id = ANY(%(ids)s);

-- name: erase_cooldowns
-- Erase the cooldowns of the listed sessions.
DELETE FROM cooldowns WHERE session_id = ANY(%(ids)s);

-- name: erase_keys
-- Erase the idempotency keys of the listed sessions' incarnations.
DELETE FROM message_keys
WHERE incarnation IN (SELECT incarnation FROM sessions WHERE id = ANY(%(ids)s));

-- name: erase_turn_keys
-- Erase the turn keys of the listed sessions' incarnations.
DELETE FROM turn_keys
WHERE incarnation IN (SELECT incarnation FROM sessions WHERE id = ANY(%(ids)s));

-- name: erase_sessions
-- Erase the listed sessions' rows (last: every row naming them is gone).
DELETE FROM sessions WHERE id = ANY(%(ids)s);

-- name: retract_last
-- Retract the newest live message of a session, in one statement.
UPDATE messages
SET state = 'retracted', archived_at = coalesce(%(now)s::double precision,
                                                extract(epoch FROM clock_timestamp())::double precision)
WHERE id = (SELECT id FROM messages
            WHERE session_id = %(session_id)s AND state = 'live'
              AND seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s)
            ORDER BY seq DESC LIMIT 1)
RETURNING id, session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
          created_at, 'live' AS state, origin_id, key, usage;

-- name: idle_lineages
-- Expiry: the lineages (root id, and each session without a continuation: its tips)
-- with no activity in the last idle_for seconds on the database clock. Activity: a
-- session created, a message appended (a session's last row by seq is its newest),
-- a turn or compaction lease live now. source limits it to one source (a lineage
-- shares its root's), root to one lineage.
WITH RECURSIVE clock AS (
    SELECT coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision) AS now
),
lineage (root, id) AS (
    SELECT id, id FROM sessions
    WHERE parent_session_id IS NULL
      AND (%(source)s::text IS NULL OR source = %(source)s::text)
      AND (%(root)s::text IS NULL OR id = %(root)s::text)
    UNION ALL
    SELECT l.root, s.id FROM sessions AS s JOIN lineage AS l ON s.parent_session_id = l.id
),
idle (root) AS (
    SELECT l.root FROM lineage AS l JOIN sessions AS s ON s.id = l.id CROSS JOIN clock
    GROUP BY l.root, clock.now
    HAVING max(s.created_at) <= clock.now - %(idle_for)s
       AND coalesce(max((SELECT m.created_at FROM messages AS m WHERE m.session_id = s.id
                         ORDER BY m.seq DESC LIMIT 1)), 0) <= clock.now - %(idle_for)s
       AND NOT bool_or(s.turn_holder IS NOT NULL AND s.turn_expires_at > clock.now)
       AND NOT bool_or(EXISTS (SELECT 1 FROM leases AS k WHERE k.session_id = s.id
                               AND k.holder IS NOT NULL AND k.expires_at > clock.now))
)
SELECT l.root, l.id AS tip FROM idle JOIN lineage AS l ON l.root = idle.root
WHERE NOT EXISTS (SELECT 1 FROM sessions AS c WHERE c.parent_session_id = l.id)
ORDER BY l.root COLLATE "C", l.id COLLATE "C";

-- name: prune_archive
-- Retention: archived rows that left the live transcript older_than seconds ago or
-- more keep only their place (id, seq, role, created_at). ids limits it to some
-- sessions; NULL means every session.
UPDATE messages
SET state = 'pruned', content = '""', name = NULL, tool_calls = NULL, meta = '{}'
WHERE state IN ('compacted', 'superseded', 'retracted')
  AND archived_at <= coalesce(%(now)s::double precision,
                              extract(epoch FROM clock_timestamp())::double precision) - %(older_than)s
  AND (%(ids)s::text[] IS NULL OR session_id = ANY(%(ids)s::text[]));

-- name: children
-- The sessions whose parent is this one, oldest first, as session rows.
SELECT s.id, s.source, s.parent_session_id, s.created_at, s.ended_at, s.end_reason,
       s.epoch, s.metadata, s.incarnation, s.branch_of_session, s.branch_of_seq, c.until AS cooldown_until, c.error AS cooldown_error
FROM sessions s LEFT JOIN cooldowns c ON c.session_id = s.id
WHERE s.parent_session_id = %(session_id)s
ORDER BY s.created_at, s.id;

-- name: child_ids
-- The ids of a session's children, oldest first (a lineage walk).
SELECT id FROM sessions WHERE parent_session_id = %(session_id)s ORDER BY created_at, id;

-- name: end_session
-- Guarded by ended_at IS NULL: a session ends once.
UPDATE sessions
SET ended_at = coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision),
    end_reason = %(reason)s
WHERE id = %(session_id)s AND ended_at IS NULL
RETURNING id;

-- ---------------------------------------------------------------- messages

-- name: live_messages
-- A session's live transcript, in seq order.
SELECT id, session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
       created_at, state, origin_id, key, usage
FROM messages
WHERE session_id = %(session_id)s AND state = 'live'
  AND seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s)  -- a range of the unique index
ORDER BY seq;

-- name: latest_live
-- The newest %(limit)s live rows, newest first (the caller reverses them): read
-- from the end of the same range, so they cost %(limit)s rows whatever the
-- transcript's length.
SELECT id, session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
       created_at, state, origin_id, key, usage
FROM messages
WHERE session_id = %(session_id)s AND state = 'live'
  AND seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s)
ORDER BY seq DESC LIMIT %(limit)s;

-- name: archived_messages
-- A session's archived rows (compacted, superseded, retracted), in seq order.
SELECT id, session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
       created_at, state, origin_id, key, usage
FROM messages WHERE session_id = %(session_id)s AND state <> 'live'
ORDER BY seq;

-- ---------------------------------------------------------------- leases

-- name: acquire_lease
-- One statement: take the row when it is free, expired, or ours; the token only
-- ever goes up (a new row starts above every erased row's: lease_token_floor).
-- No row returned means another holder's lease is live.
WITH clock AS (SELECT coalesce(%(now)s::double precision,
                               extract(epoch FROM clock_timestamp())::double precision) AS t)
INSERT INTO leases (session_id, holder, token, acquired_at, expires_at)
SELECT %(session_id)s, %(holder)s, (SELECT token + 1 FROM lease_token_floor), clock.t, clock.t + %(ttl)s
FROM clock
ON CONFLICT (session_id) DO UPDATE
SET holder = EXCLUDED.holder,
    token = leases.token + 1,
    acquired_at = EXCLUDED.acquired_at,
    expires_at = EXCLUDED.expires_at
WHERE leases.holder IS NULL
   OR leases.holder = EXCLUDED.holder
   OR leases.expires_at <= EXCLUDED.acquired_at
RETURNING session_id, holder, token, acquired_at, expires_at;

-- name: renew_lease
-- Extend a live compaction lease held with this token; nothing when it is lost.
UPDATE leases
SET expires_at = coalesce(%(now)s::double precision,
                          extract(epoch FROM clock_timestamp())::double precision) + %(ttl)s
WHERE session_id = %(session_id)s AND holder = %(holder)s AND token = %(token)s
  AND expires_at > coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision)
RETURNING session_id, holder, token, acquired_at, expires_at;

-- name: release_lease
-- The token stays: the next acquire continues from it.
UPDATE leases
SET holder = NULL,
    expires_at = least(expires_at, coalesce(%(now)s::double precision,
                                            extract(epoch FROM clock_timestamp())::double precision))
WHERE session_id = %(session_id)s AND holder = %(holder)s AND token = %(token)s
RETURNING token;

-- name: reap_leases
-- Expired leases are garbage a crash left: clear the holder, keep the token (the
-- next acquire continues from it) and leave live leases alone.
UPDATE leases SET holder = NULL
WHERE holder IS NOT NULL
  AND expires_at <= coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision)
RETURNING session_id;

-- name: current_lease
-- A session's compaction lease, if a holder has it and it has not expired.
SELECT session_id, holder, token, acquired_at, expires_at
FROM leases
WHERE session_id = %(session_id)s AND holder IS NOT NULL
  AND expires_at > coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision);

-- name: held_leases
-- Every compaction lease that has a holder, by session id.
SELECT session_id, holder, token, acquired_at, expires_at
FROM leases WHERE holder IS NOT NULL
ORDER BY session_id;

-- ---------------------------------------------------------------- compaction

-- name: fence_lease
-- The fencing check IS this write: it matches only while the row still has this
-- holder and token and has not expired, and it keeps the row locked until COMMIT,
-- so a takeover waits for us (or we see its new token and match nothing).
UPDATE leases SET holder = holder
WHERE session_id = %(session_id)s AND holder = %(holder)s AND token = %(token)s
  AND expires_at > coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision)
RETURNING acquired_at;

-- name: bump_epoch
-- Locks the session row (appends wait behind us), refuses an ended session;
-- held_turn: the token of the turn the session holds, live or dead (not yet sealed).
UPDATE sessions SET epoch = epoch + 1
WHERE id = %(session_id)s
RETURNING id, source, epoch, next_seq, incarnation, live_from, ended_at,
          CASE WHEN turn_holder IS NOT NULL THEN turn_token END AS held_turn;

-- name: turn_in_snapshot
-- Inside a compaction commit: does the snapshot hold a row of the turn the session holds?
SELECT 1 AS found FROM messages
WHERE session_id = %(session_id)s AND state = 'live' AND turn = %(turn)s AND seq <= %(watermark)s
  AND seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s)
LIMIT 1;

-- name: watermark_state
-- Inside a compaction commit: is the snapshot's last message still there?
SELECT state FROM messages WHERE session_id = %(session_id)s AND seq = %(watermark)s;

-- name: archive_compacted
-- Archive the live rows at or below the watermark as compacted.
UPDATE messages
SET state = 'compacted', archived_at = coalesce(%(now)s::double precision,
                                                extract(epoch FROM clock_timestamp())::double precision)
WHERE session_id = %(session_id)s AND state = 'live' AND seq <= %(watermark)s
  AND seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s);

-- name: verbatim_originals
-- The rows this compaction archived (compacted, seqs replaced_from to watermark)
-- whose text is one of contents: a summary row that repeats one of them verbatim
-- is written as its copy (persistence.sql._compaction).
SELECT id, role, content, name, tool_call_id, tool_calls, meta FROM messages
WHERE session_id = %(session_id)s AND state = 'compacted'
  AND seq BETWEEN %(replaced_from)s AND %(watermark)s
  AND content = ANY (%(contents)s::text[])
ORDER BY seq;

-- name: supersede_tail
-- Archive the live rows above the watermark as superseded (the tail is copied).
UPDATE messages
SET state = 'superseded', archived_at = coalesce(%(now)s::double precision,
                                                 extract(epoch FROM clock_timestamp())::double precision)
WHERE session_id = %(session_id)s AND state = 'live' AND seq > %(watermark)s
RETURNING id, seq;

-- name: close_live_range
-- Once archive_compacted and supersede_tail archived every live row of the
-- session: no row below next_seq is live any more (the new rows come after).
UPDATE sessions SET live_from = next_seq WHERE id = %(session_id)s;

-- name: advance_next_seq
-- A compaction reserves the seqs of the rows it writes (summary, then tail copies).
UPDATE sessions SET next_seq = next_seq + %(count)s WHERE id = %(session_id)s
RETURNING next_seq - %(count)s AS first_seq;

-- name: insert_compaction
-- Record a committed compaction (started_at None: now, as when a test turned the fence off).
INSERT INTO compactions (session_id, child_session_id, mode, token, holder, watermark,
                         archived_count, tail_count, compressor, started_at, committed_at,
                         replaced_from, written_from, summary_count, usage)
VALUES (%(session_id)s, %(child_session_id)s, %(mode)s, %(token)s, %(holder)s,
        %(watermark)s, %(archived_count)s, %(tail_count)s, %(compressor)s,
        coalesce(%(started_at)s, %(now)s::double precision,
                 extract(epoch FROM clock_timestamp())::double precision),
        coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision),
        %(replaced_from)s, %(written_from)s, %(summary_count)s, %(usage)s)
RETURNING id, session_id, child_session_id, mode, token, holder, watermark,
          archived_count, tail_count, compressor, started_at, committed_at, usage;

-- name: compactions
-- A session's compaction records, oldest first.
SELECT id, session_id, child_session_id, mode, token, holder, watermark,
       archived_count, tail_count, compressor, started_at, committed_at, usage
FROM compactions WHERE session_id = %(session_id)s
ORDER BY id;

-- ---------------------------------------------------------------- cooldowns

-- name: get_cooldown
-- A session's cooldown row, if any.
SELECT session_id, until, error FROM cooldowns WHERE session_id = %(session_id)s;

-- name: arm_cooldown
-- until = max(old, now + seconds); error replaced only when the new until wins.
INSERT INTO cooldowns (session_id, until, error)
VALUES (%(session_id)s,
        coalesce(%(now)s::double precision,
                 extract(epoch FROM clock_timestamp())::double precision) + %(seconds)s, %(error)s)
ON CONFLICT (session_id) DO UPDATE
SET until = greatest(cooldowns.until, EXCLUDED.until),
    error = CASE WHEN EXCLUDED.until > cooldowns.until THEN EXCLUDED.error
                 ELSE cooldowns.error END
RETURNING session_id, until, error;

-- name: put_cooldown
-- Set a session's cooldown to exactly this deadline and error (a restore).
INSERT INTO cooldowns (session_id, until, error)
VALUES (%(session_id)s, %(until)s, %(error)s)
ON CONFLICT (session_id) DO UPDATE SET until = EXCLUDED.until, error = EXCLUDED.error;

-- name: delete_cooldown
-- Clear a session's cooldown.
DELETE FROM cooldowns WHERE session_id = %(session_id)s;

-- ---------------------------------------------------------------- notifications

-- name: open_turn
-- Taken when the lease is free (closed or sealed) or live and already this holder's
-- (a lease its registry lost track of); another holder's live lease matches nothing,
-- and so does a dead one (lapsed while held: seal_turn first), whoever asks.
-- The UPDATE takes the session row lock: appends in flight commit first.
UPDATE sessions
SET turn_holder = %(holder)s, turn_token = nextval('turn_tokens'),
    turn_expires_at = coalesce(%(now)s::double precision,
                               extract(epoch FROM clock_timestamp())::double precision) + %(ttl)s,
    turn_interrupted = false
WHERE id = %(session_id)s AND ended_at IS NULL AND coalesce(%(incarnation)s::text = incarnation, true)
  AND (turn_holder IS NULL
       OR (turn_holder = %(holder)s
           AND turn_expires_at > coalesce(%(now)s::double precision,
                                          extract(epoch FROM clock_timestamp())::double precision)))
RETURNING id, turn_holder, turn_token, turn_expires_at, turn_interrupted;

-- name: turn_of
-- A session's turn columns, for a verdict on a refused write.
SELECT id, ended_at, turn_holder, turn_token, turn_expires_at, turn_interrupted,
       turn_holder IS NOT NULL
           AND turn_expires_at > coalesce(%(now)s::double precision,
                                          extract(epoch FROM clock_timestamp())::double precision) AS turn_live
FROM sessions WHERE id = %(session_id)s;

-- name: roll_back_turn
-- The rows of turn :token still at the end of the live transcript leave it
-- (retracted, archived), as a retract of each would.
UPDATE messages AS m
SET state = 'retracted', archived_at = coalesce(%(now)s::double precision,
                                                extract(epoch FROM clock_timestamp())::double precision)
WHERE m.session_id = %(session_id)s AND m.state = 'live' AND m.turn = %(token)s
  AND m.seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s)
  AND m.seq > coalesce((SELECT max(o.seq) FROM messages AS o
                        WHERE o.session_id = %(session_id)s AND o.state = 'live'
                          AND o.turn IS DISTINCT FROM %(token)s
                          AND o.seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s)), 0)
RETURNING m.id;

-- name: renew_turn
-- Matched by token (one sequence: unique) on the live session that carries it.
UPDATE sessions
SET turn_expires_at = coalesce(%(now)s::double precision,
                               extract(epoch FROM clock_timestamp())::double precision) + %(ttl)s
WHERE turn_token = %(token)s AND turn_holder = %(holder)s AND ended_at IS NULL
  AND turn_expires_at > coalesce(%(now)s::double precision,
                                 extract(epoch FROM clock_timestamp())::double precision)
RETURNING id, turn_holder, turn_token, turn_expires_at, turn_interrupted;

-- name: close_turn
-- Matched by token on the live session that carries it. One that waited for the row
-- lock of a rotation's commit finds that row ended and matches nothing (the
-- continuation, carrying the lease now, is not in its snapshot): the caller looks
-- again in a new statement (turn_carrier), as for renew_turn.
UPDATE sessions
SET turn_holder = NULL, turn_interrupted = false,
    turn_expires_at = least(turn_expires_at, coalesce(%(now)s::double precision,
                                                      extract(epoch FROM clock_timestamp())::double precision))
WHERE turn_token = %(token)s AND turn_holder = %(holder)s AND ended_at IS NULL
RETURNING id;

-- name: interrupt_turn
-- Ask the live turn of a session to stop, returning its token.
UPDATE sessions SET turn_interrupted = true
WHERE id = %(session_id)s AND turn_holder IS NOT NULL
  AND turn_expires_at > coalesce(%(now)s::double precision,
                                 extract(epoch FROM clock_timestamp())::double precision)
RETURNING turn_token;

-- name: turn_first_seq
-- The first live row appended under token (NULL before the turn appended), and the
-- turn's key (NULL: none).
SELECT min(seq) AS first_seq, (SELECT k.key FROM turn_keys AS k WHERE k.token = %(token)s) AS key
FROM messages
WHERE session_id = %(session_id)s AND state = 'live' AND turn = %(token)s
  AND seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s);

-- name: live_turns
-- Every session with a live turn (a holder, not expired, not ended).
SELECT id, turn_holder, turn_token, turn_expires_at, turn_interrupted FROM sessions
WHERE turn_token IS NOT NULL AND turn_holder IS NOT NULL AND ended_at IS NULL
  AND turn_expires_at > coalesce(%(now)s::double precision,
                                 extract(epoch FROM clock_timestamp())::double precision)
  AND (%(holder)s::text IS NULL OR turn_holder = %(holder)s::text)
ORDER BY id COLLATE "C";

-- name: interrupted_turns
-- The live turns of a holder that were asked to stop.
SELECT id, turn_holder, turn_token, turn_expires_at, turn_interrupted FROM sessions
WHERE turn_holder = %(holder)s AND turn_interrupted AND ended_at IS NULL;

-- ---------------------------------------------------------------- keys

-- name: claim_key
-- A key another open transaction is claiming waits for it, then is found taken.
INSERT INTO message_keys (incarnation, key) VALUES (%(incarnation)s, %(key)s)
ON CONFLICT DO NOTHING
RETURNING key;

-- name: keyed_row
-- The stored row carrying key in the conversation incarnation, live first.
SELECT m.id, m.session_id, m.seq, m.role, m.content, m.name, m.tool_call_id, m.tool_calls, m.meta,
       m.created_at, m.state, m.origin_id, m.key, m.usage
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.key = %(key)s AND s.incarnation = %(incarnation)s
ORDER BY m.state = 'live' DESC, m.id
LIMIT 1;

-- name: rows_by_id
-- Message rows by id, in id order.
SELECT id, session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
       created_at, state, origin_id, key, usage
FROM messages WHERE id = ANY(%(ids)s) ORDER BY id;

-- ---------------------------------------------------------------- sealing and keyed turns

-- name: turn_carrier
-- The live session carrying the turn lease token of holder (NULL: any holder, a
-- held lease), read in a statement of its own: after an UPDATE that waited for a
-- rotation's commit and found the parent ended, the continuation carrying the lease
-- is visible here. live: only while the lease is live.
SELECT id, turn_holder, turn_token, turn_expires_at,
       turn_expires_at > coalesce(%(now)s::double precision,
                                  extract(epoch FROM clock_timestamp())::double precision) AS turn_live
FROM sessions
WHERE turn_token = %(token)s AND ended_at IS NULL
  AND (turn_holder = %(holder)s::text OR (%(holder)s::text IS NULL AND turn_holder IS NOT NULL))
  AND (NOT %(live)s OR turn_expires_at > coalesce(%(now)s::double precision,
                                                  extract(epoch FROM clock_timestamp())::double precision));

-- name: lock_turn_carrier
-- seal_turn with a lease: the live session carrying it, locked (appends and a
-- rotation's commit wait behind us, or we behind them).
SELECT id FROM sessions
WHERE turn_token = %(token)s AND turn_holder = %(holder)s AND ended_at IS NULL
FOR UPDATE;

-- name: turn_transcript
-- The live transcript with the turn each row was appended under (seal_turn).
SELECT id, session_id, seq, role, content, name, tool_call_id, tool_calls, meta,
       created_at, state, origin_id, key, usage, turn
FROM messages
WHERE session_id = %(session_id)s AND state = 'live'
  AND seq >= (SELECT live_from FROM sessions WHERE id = %(session_id)s)
ORDER BY seq;

-- name: retract_rows
-- seal_turn: the rows ids leave the live transcript as a retract takes each
-- (retracted, archived, their seqs kept).
UPDATE messages
SET state = 'retracted', archived_at = coalesce(%(now)s::double precision,
                                                extract(epoch FROM clock_timestamp())::double precision)
WHERE id = ANY(%(ids)s::bigint[]) AND state = 'live';

-- name: seal_turn
-- The dead (or given up) turn token ends: the lease is released, its token kept.
UPDATE sessions
SET turn_holder = NULL, turn_interrupted = false,
    turn_expires_at = least(turn_expires_at, coalesce(%(now)s::double precision,
                                                      extract(epoch FROM clock_timestamp())::double precision))
WHERE id = %(session_id)s AND turn_token = %(token)s AND turn_holder IS NOT NULL
RETURNING id;

-- name: turn_key
-- Locked: a second open of the same key waits for the first to commit.
SELECT token, state FROM turn_keys WHERE incarnation = %(incarnation)s AND key = %(key)s
FOR UPDATE;

-- name: claim_turn_key
-- The key names the turn just opened (a new key, or one whose turn was sealed or
-- dropped: seen, the token it named when read, NULL for none). A key another open
-- transaction claims meanwhile waits for it, then matches nothing.
INSERT INTO turn_keys (incarnation, key, token, state, opened_at)
VALUES (%(incarnation)s, %(key)s, %(token)s, 'open',
        coalesce(%(now)s::double precision, extract(epoch FROM clock_timestamp())::double precision))
ON CONFLICT (incarnation, key) DO UPDATE
SET token = EXCLUDED.token, state = 'open', opened_at = EXCLUDED.opened_at
WHERE turn_keys.token = %(seen)s::bigint
RETURNING key;

-- name: turn_key_open
-- Whether a turn's token names an open keyed turn: its close completes the key, so it is durable.
SELECT 1 AS keyed FROM turn_keys WHERE token = %(token)s AND state = 'open';

-- name: complete_turn_key
-- Mark a turn's key completed when the turn closes.
UPDATE turn_keys SET state = 'completed' WHERE token = %(token)s AND state = 'open';

-- name: seal_turn_key
-- Mark a turn's key sealed when its turn is sealed.
UPDATE turn_keys SET state = 'sealed' WHERE token = %(token)s AND state = 'open';

-- name: turn_replay
-- The messages a completed turn token stored in the lineage of id, in the order
-- appended: each original (origin_id NULL), as its newest copy when that is live (a
-- compaction carried it), else as the original (a summary replaced it); one
-- retracted (the original, or its newest copy) is left out.
WITH RECURSIVE
    up (id, parent) AS (
        SELECT id, parent_session_id FROM sessions WHERE id = %(session_id)s
        UNION SELECT s.id, s.parent_session_id FROM sessions s JOIN up ON s.id = up.parent
    ),
    lineage (id) AS (
        SELECT id FROM up
        UNION SELECT s.id FROM sessions s JOIN lineage ON s.parent_session_id = lineage.id
    ),
    chain (original, id, depth) AS (
        SELECT m.id, m.id, 0 FROM messages AS m
        WHERE m.session_id IN (SELECT id FROM lineage) AND m.turn = %(token)s AND m.origin_id IS NULL
        UNION ALL
        SELECT c.original, n.id, c.depth + 1 FROM chain AS c JOIN messages AS n ON n.origin_id = c.id
    ),
    newest AS (
        SELECT DISTINCT ON (original) original, id FROM chain ORDER BY original, depth DESC
    )
SELECT m.id, m.session_id, m.seq, m.role, m.content, m.name, m.tool_call_id, m.tool_calls, m.meta,
       m.created_at, m.state, m.origin_id, m.key, m.usage
FROM newest
JOIN messages AS n ON n.id = newest.id
JOIN messages AS m ON m.id = CASE WHEN n.state = 'live' THEN n.id ELSE newest.original END
WHERE n.state <> 'retracted'
ORDER BY newest.original;
