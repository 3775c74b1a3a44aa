-- Reading the archive back (PostgreSQL): search and what a compaction did.

-- name: search_archive
-- Ranked matches of every term of the query in the archive: every word of query
-- (plainto_tsquery of the words persistence._recall found: a user's text is
-- matched, never parsed as query syntax), then each of phrases (the terms of
-- several words) with its words next to each other (holds_phrases). The tsvector
-- expression and the state predicate are the ones messages_search_idx indexes.
-- Ranked among the newest candidates matches only: ranking reads each match's text
-- again, and a word in every tenth message would have a hundred thousand. A text
-- carried across compactions is one hit, at its newest copy: a row with a copy in
-- its own conversation is passed over. ids limits it to some sessions. The snippet
-- is made from content by persistence._recall.
WITH candidates AS (
    SELECT m.id, m.session_id, m.seq, m.role, m.state, m.content
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE search_vector(m.content) @@ plainto_tsquery('simple'::regconfig, %(query)s)
      AND m.state IN ('compacted', 'superseded')
      AND holds_phrases(m.content, %(phrases)s::text[])
      AND (%(source)s::text IS NULL OR s.source = %(source)s::text)
      AND (%(ids)s::text[] IS NULL OR m.session_id = ANY (%(ids)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM messages AS c JOIN sessions AS cs ON cs.id = c.session_id
                      WHERE c.origin_id = m.id AND cs.incarnation = s.incarnation)
    ORDER BY m.id DESC
    LIMIT %(candidates)s
),
hits AS (
    SELECT c.*, ts_rank(search_vector(c.content), plainto_tsquery('simple'::regconfig, %(query)s)) AS score
    FROM candidates AS c
    ORDER BY score DESC, c.id
    LIMIT %(limit)s
)
SELECT h.session_id, h.seq, h.role, h.state, h.content, -h.score AS rank
FROM hits AS h
ORDER BY h.score DESC, h.id;

-- name: search_live
-- The live rows holding every term, newest first: no index holds them (appends
-- stay cheap), so the live rows are read, newest first until the page is full,
-- first narrowed by the ASCII words (a JSON array, lower case) in their
-- lower-cased JSON text, then matched as search_archive matches.
SELECT m.session_id, m.seq, m.role, m.state, m.content,
       -ts_rank(search_vector(m.content), plainto_tsquery('simple'::regconfig, %(query)s)) AS rank
FROM messages AS m
JOIN sessions AS s ON s.id = m.session_id
WHERE m.state = 'live'
  AND (%(source)s::text IS NULL OR s.source = %(source)s::text)
  AND NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(%(words)s::jsonb) AS w (word)
                  WHERE strpos(lower(m.content), w.word) = 0)
  AND search_vector(m.content) @@ plainto_tsquery('simple'::regconfig, %(query)s)
  AND holds_phrases(m.content, %(phrases)s::text[])
ORDER BY m.id DESC
LIMIT %(limit)s;

-- name: search_live_in
-- search_live within the sessions ids: their live rows first, from the partial
-- index messages_live_idx (MATERIALIZED: not a walk over every row, newest first).
WITH rows AS MATERIALIZED (
    SELECT m.id, m.session_id, m.seq, m.role, m.state, m.content
    FROM messages AS m
    WHERE m.session_id = ANY (%(ids)s::text[]) AND m.state = 'live'
)
SELECT r.session_id, r.seq, r.role, r.state, r.content,
       -ts_rank(search_vector(r.content), plainto_tsquery('simple'::regconfig, %(query)s)) AS rank
FROM rows AS r
JOIN sessions AS s ON s.id = r.session_id
WHERE (%(source)s::text IS NULL OR s.source = %(source)s::text)
  AND search_vector(r.content) @@ plainto_tsquery('simple'::regconfig, %(query)s)
  AND holds_phrases(r.content, %(phrases)s::text[])
ORDER BY r.id DESC
LIMIT %(limit)s;

-- name: get_compaction
-- One compaction record by id.
SELECT id, session_id, child_session_id, mode, token, holder, watermark,
       archived_count, tail_count, compressor, started_at, committed_at,
       replaced_from, written_from, summary_count, usage
FROM compactions WHERE id = %(id)s;

-- name: legacy_replaced_rows
-- A compaction from before version 6 recorded no range: the archived rows above
-- the previous compaction's watermark of its session.
SELECT * FROM messages
WHERE session_id = %(session_id)s AND seq <= %(last)s AND state IN ('compacted', 'pruned')
  AND seq > coalesce((SELECT max(k.watermark) FROM compactions AS k
                      WHERE k.session_id = %(session_id)s AND k.id < %(id)s), 0)
ORDER BY seq;

-- name: rows_in_range
-- A session's rows with seqs in a range, in seq order.
SELECT * FROM messages
WHERE session_id = %(session_id)s AND seq BETWEEN %(first)s AND %(last)s
ORDER BY seq;

-- name: usage
-- The recorded usage (persistence._usage) of the sessions %(ids)s (NULL: every
-- session) of %(source)s (NULL: any), summed per kind and model: messages in every
-- state (a retracted or compacted message's call was made all the same) and
-- compactions. A copy records none, so each call counts once.
SELECT 'message' AS kind, m.usage::jsonb ->> 'model' AS model,
       sum((m.usage::jsonb ->> 'input_tokens')::bigint) AS input_tokens,
       sum((m.usage::jsonb ->> 'output_tokens')::bigint) AS output_tokens
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.usage IS NOT NULL
  AND (%(ids)s::text[] IS NULL OR m.session_id = ANY(%(ids)s::text[]))
  AND (%(source)s::text IS NULL OR s.source = %(source)s::text)
GROUP BY 2
UNION ALL
SELECT 'compaction', c.usage::jsonb ->> 'model',
       sum((c.usage::jsonb ->> 'input_tokens')::bigint), sum((c.usage::jsonb ->> 'output_tokens')::bigint)
FROM compactions AS c JOIN sessions AS s ON s.id = c.session_id
WHERE c.usage IS NOT NULL
  AND (%(ids)s::text[] IS NULL OR c.session_id = ANY(%(ids)s::text[]))
  AND (%(source)s::text IS NULL OR s.source = %(source)s::text)
GROUP BY 2;
