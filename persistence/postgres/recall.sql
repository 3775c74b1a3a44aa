-- Reading the archive back (PostgreSQL): search and what a compaction did.

-- name: search_messages
-- Ranked matches of every word of query (plainto_tsquery: a user's text is
-- matched, never parsed as query syntax). The tsvector expression is the one
-- messages_search_idx indexes. A text carried across compactions is one hit, at
-- its newest copy: a row with a copy in its own conversation is passed over.
-- Retracted and pruned rows never match. ids limits it to some sessions.
WITH hits AS (
    SELECT m.id, m.session_id, m.seq, m.role, m.state, m.content,
           ts_rank(to_tsvector('simple'::regconfig, coalesce(message_text(m.content), '')),
                   plainto_tsquery('simple'::regconfig, %(query)s)) AS score
    FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE to_tsvector('simple'::regconfig, coalesce(message_text(m.content), ''))
          @@ plainto_tsquery('simple'::regconfig, %(query)s)
      AND m.state IN ('live', 'compacted', 'superseded')
      AND (%(archived)s OR m.state = 'live')
      AND (%(source)s::text IS NULL OR s.source = %(source)s::text)
      AND (%(ids)s::text[] IS NULL OR m.session_id = ANY (%(ids)s::text[]))
      AND NOT EXISTS (SELECT 1 FROM messages AS c JOIN sessions AS cs ON cs.id = c.session_id
                      WHERE c.origin_id = m.id AND cs.incarnation = s.incarnation)
    ORDER BY score DESC, m.id
    LIMIT %(limit)s
)
SELECT h.session_id, h.seq, h.role, h.state, -h.score AS rank,
       ts_headline('simple'::regconfig, coalesce(message_text(h.content), ''),
                   plainto_tsquery('simple'::regconfig, %(query)s),
                   'StartSel=[, StopSel=], MaxWords=16, MinWords=6, MaxFragments=1, FragmentDelimiter=" … "') AS snippet
FROM hits AS h
ORDER BY h.score DESC, h.id;

-- name: get_compaction
SELECT id, session_id, child_session_id, mode, token, holder, watermark,
       archived_count, tail_count, compressor, started_at, committed_at,
       replaced_from, written_from, summary_count
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
SELECT * FROM messages
WHERE session_id = %(session_id)s AND seq BETWEEN %(first)s AND %(last)s
ORDER BY seq;
