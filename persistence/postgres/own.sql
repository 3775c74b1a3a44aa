-- The statements only PostgreSQL runs (each with why SQLite has no twin in
-- tests/persistence/test_queries.py): queries.sql and recall.sql name alike in both dialects.

-- name: clock
-- The server's wall clock in epoch seconds (every lease and turn time, unless the store was given a clock).
SELECT extract(epoch FROM clock_timestamp())::double precision AS now;

-- name: lock_lineage_leases
-- Erasure locks in the order a compaction commit does: lease rows, then sessions.
SELECT session_id FROM leases WHERE session_id = ANY(%(ids)s) ORDER BY session_id FOR UPDATE;

-- name: lock_lineage_sessions
-- Lock the rows of a lineage, in id order, before it is erased.
SELECT id FROM sessions WHERE id = ANY(%(ids)s) ORDER BY id FOR UPDATE;

-- name: lock_session
-- Orders a retraction with appends and compaction commits (they take this row lock too).
SELECT id, ended_at, end_reason, incarnation, turn_holder, turn_token,
       turn_holder IS NOT NULL
           AND turn_expires_at > coalesce(%(now)s::double precision,
                                          extract(epoch FROM clock_timestamp())::double precision) AS turn_live
FROM sessions WHERE id = %(id)s FOR UPDATE;

-- name: append_batch
-- Group commit: every append of a batch in one autocommit statement (one round
-- trip, one WAL flush). The session rows are locked first, in id order (every
-- writer locks in the same order, so two processes' batches cannot deadlock),
-- FOR NO KEY UPDATE like the UPDATE they stand for (foreign-key checks are not
-- blocked). Seqs are numbered from next_seq under those locks, so they follow
-- commit order; rows of one session keep the batch's order (ord). A missing or
-- ended session, another incarnation than the one meant (wanted: {id:
-- incarnation or null for any}), or one holding a turn its appends do not carry
-- live (turns: {id: the token its appends carry}; a dead turn, lapsed while held,
-- admits nobody) gets no rows back: its requests fail alone. So does a session whose row another transaction holds (SKIP LOCKED): one
-- locked session must not hold up, or time out, every session batched with it;
-- the writer tries its requests again in a later batch. The rows arrive as one
-- JSON array of [session_id, role, content, name, tool_call_id, tool_calls,
-- meta, turn, key, usage] arrays (text or null): one parameter, far cheaper for
-- the client to send than seven arrays. Read as jsonb, parsed once:
-- each ->> of a json value scans its text again (a quarter of the statement's
-- server CPU for a batch of 30).
WITH input AS (
    SELECT r ->> 0 AS session_id, r ->> 1 AS role, r ->> 2 AS content, r ->> 3 AS name,
           r ->> 4 AS tool_call_id, r ->> 5 AS tool_calls, r ->> 6 AS meta,
           (r ->> 7)::bigint AS turn, r ->> 8 AS key, r ->> 9 AS usage, m.ord
    FROM jsonb_array_elements(%(rows)s::jsonb) WITH ORDINALITY AS m(r, ord)
),
locked AS (
    SELECT id FROM sessions
    WHERE id = ANY(ARRAY(SELECT session_id FROM input)) AND ended_at IS NULL
      AND coalesce(%(wanted)s::jsonb ->> id = incarnation, true)
      AND CASE WHEN (%(turns)s::jsonb -> id) IS NULL
               THEN turn_holder IS NULL
               ELSE coalesce(turn_token = (%(turns)s::jsonb ->> id)::bigint, false) AND turn_holder IS NOT NULL
                    AND turn_expires_at > coalesce(%(now)s::double precision,
                                                   extract(epoch FROM clock_timestamp())::double precision) END
    ORDER BY id
    FOR NO KEY UPDATE SKIP LOCKED
),
counts AS (SELECT session_id, count(*) AS n FROM input GROUP BY session_id),
bumped AS (
    UPDATE sessions s SET next_seq = s.next_seq + c.n
    FROM counts c, locked l
    WHERE s.id = c.session_id AND l.id = s.id AND s.ended_at IS NULL
    RETURNING s.id, s.next_seq - c.n AS first_seq
),
numbered AS (
    SELECT i.*, b.first_seq - 1 + row_number() OVER (PARTITION BY i.session_id ORDER BY i.ord) AS seq
    FROM input i JOIN bumped b ON b.id = i.session_id
),
-- the deadline check last, once: a backend frozen before it runs refuses on resume
clock AS (SELECT coalesce(%(now)s::double precision,
                          extract(epoch FROM clock_timestamp())::double precision) AS t
          WHERE call_deadline_check(%(until)s::double precision))
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, state, origin_id, turn, key, usage)
SELECT n.session_id, n.seq, n.role, n.content, n.name, n.tool_call_id, n.tool_calls,
       n.meta, clock.t, 'live', NULL, n.turn, n.key, n.usage
FROM numbered n, clock
ORDER BY n.ord
RETURNING id, session_id, seq, created_at;

-- name: create_sessions
-- Group commit of plain creates, in id order (the same order in every writer).
-- An id that exists (or is being created by another open transaction, which
-- this waits for) returns no row: SessionExistsError for its caller only.
-- The rows arrive as one JSON array of [id, source, metadata JSON text,
-- incarnation] arrays.
INSERT INTO sessions (id, source, parent_session_id, created_at, metadata, incarnation)
SELECT u.r ->> 0, u.r ->> 1, NULL, coalesce(%(now)s::double precision,
                                            extract(epoch FROM clock_timestamp())::double precision),
       (u.r ->> 2)::jsonb, u.r ->> 3
FROM json_array_elements(%(rows)s::json) WITH ORDINALITY AS u(r, ord)
WHERE call_deadline_check(%(until)s::double precision)
ORDER BY u.ord
ON CONFLICT (id) DO NOTHING
RETURNING id, source, parent_session_id, created_at, ended_at, end_reason, epoch, metadata, incarnation,
          branch_of_session, branch_of_seq,
          NULL::double precision AS cooldown_until, NULL::text AS cooldown_error;

-- name: insert_messages
-- New live rows numbered from first_seq (a compaction's compacted set, a branch's
-- rows); origins names the row each repeats verbatim (NULL: none).
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, state, origin_id)
SELECT %(session_id)s, %(first_seq)s + m.ord - 1, m.role, m.content, m.name,
       m.tool_call_id, m.tool_calls, m.meta,
       coalesce(%(now)s::double precision,
                extract(epoch FROM clock_timestamp())::double precision), 'live', m.origin_id
FROM unnest(%(roles)s::text[], %(contents)s::text[], %(names)s::text[],
            %(tool_call_ids)s::text[], %(tool_calls)s::text[], %(metas)s::text[],
            %(origins)s::bigint[])
         WITH ORDINALITY AS m(role, content, name, tool_call_id, tool_calls, meta, origin_id, ord)
ORDER BY m.ord;

-- name: damaged_rows
-- fsck: the rows whose stored text no longer matches the checksum written with it.
SELECT session_id, seq FROM messages
WHERE checksum IS DISTINCT FROM message_checksum(role, content, name, tool_call_id, tool_calls, meta);

-- name: copy_tail
-- Copies are verbatim and in seq order, numbered from first_seq; each carries
-- the id of the row it continues.
INSERT INTO messages (session_id, seq, role, content, name, tool_call_id, tool_calls,
                      meta, created_at, state, origin_id, turn, key)
SELECT %(target)s, %(first_seq)s - 1 + row_number() OVER (ORDER BY seq),
       role, content, name, tool_call_id, tool_calls, meta,
       coalesce(%(now)s::double precision,
                extract(epoch FROM clock_timestamp())::double precision), 'live', id, turn, key
FROM messages WHERE id = ANY(%(ids)s)
ORDER BY seq;

-- name: insert_branch
-- A branch: a conversation of its own (a new incarnation, no parent) that records
-- the session and seq it started from, with its source and (metadata NULL) its
-- metadata; its rows are inserted from seq 1.
INSERT INTO sessions (id, source, parent_session_id, created_at, next_seq, metadata, incarnation,
                      branch_of_session, branch_of_seq)
SELECT %(id)s, o.source, NULL, coalesce(%(now)s::double precision,
                                        extract(epoch FROM clock_timestamp())::double precision),
       %(next_seq)s, coalesce(%(metadata)s::jsonb, o.metadata), %(incarnation)s, o.id, %(at_seq)s
FROM sessions AS o WHERE o.id = %(branch_of)s;

-- name: insert_child
-- A continuation starts with its parent's metadata and incarnation, and carries
-- its turn lease (read under the parent's row lock the commit holds; a dead lease
-- too: it is sealed there, on the copies of its rows).
INSERT INTO sessions (id, source, parent_session_id, created_at, next_seq, metadata, incarnation,
                      turn_holder, turn_token, turn_expires_at, turn_interrupted)
SELECT %(session_id)s, %(source)s, %(parent_session_id)s,
       coalesce(%(now)s::double precision,
                extract(epoch FROM clock_timestamp())::double precision), 1, p.metadata, p.incarnation,
       p.turn_holder, p.turn_token, p.turn_expires_at, p.turn_interrupted
FROM sessions p WHERE p.id = %(parent_session_id)s;

-- name: notify_compaction
-- A hint for other processes, delivered only if the commit succeeds; never the
-- only signal (a listener may be down). The schema is in the payload because
-- channels are database-wide.
SELECT pg_notify('session_actors_compaction', json_build_object(
    'schema', current_schema(),
    'session_id', %(session_id)s::text,
    'child_session_id', %(child_session_id)s::text,
    'mode', %(mode)s::text,
    'token', %(token)s::bigint
)::text);

-- name: listen_compactions
-- Subscribe this connection to the hints of committed compactions.
LISTEN session_actors_compaction;

-- name: notify_turn_closed
-- A hint for registries holding calls behind this turn (delivered on COMMIT only).
SELECT pg_notify('session_actors_turn', json_build_object(
    'schema', current_schema(),
    'session_id', %(session_id)s::text
)::text);

-- name: listen_turns
-- Subscribe this connection to the hints of closed turns.
LISTEN session_actors_turn;

-- name: current_schema
-- The schema this connection works in (a store is a schema).
SELECT current_schema() AS schema;

