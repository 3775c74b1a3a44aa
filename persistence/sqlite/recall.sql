-- Reading the archive back (SQLite): search and what a compaction did.

-- name: search_archive
-- Ranked matches of :query (FTS5 syntax, built by persistence._recall: every term
-- a phrase, its words next to each other) in the archive of every session
-- (:source, when given, of that source). A text carried across compactions is one
-- hit, at its newest copy: a row with a copy in its own conversation is passed
-- over. BM25 scores every match: a word in a tenth of a million archived messages
-- takes about half a second (bench_archive).
SELECT m.session_id, m.seq, m.role, m.state,
       snippet(message_search, 0, '[', ']', '…', 16) AS snippet,
       bm25(message_search) AS rank
FROM message_search
JOIN messages AS m ON m.id = message_search.rowid
JOIN sessions AS s ON s.id = m.session_id
WHERE message_search MATCH :query
  AND m.state IN ('compacted', 'superseded')
  AND (:source IS NULL OR s.source = :source)
  AND NOT EXISTS (SELECT 1 FROM messages AS c JOIN sessions AS cs ON cs.id = c.session_id
                  WHERE c.origin_id = m.id AND cs.incarnation = s.incarnation)
ORDER BY rank, m.id
LIMIT :limit

-- name: search_live
-- Live rows that may hold every term, newest first: each of :words (a JSON array of
-- lower-case ASCII words: letters and digits, so no LIKE wildcard) is in the row's
-- JSON text (LIKE folds ASCII case). A superset: persistence._recall matches the
-- terms exactly on the decoded text.
-- Every session's: a walk over every row, newest first, stopped once the page is
-- full.
SELECT m.session_id, m.seq, m.role, m.content
FROM messages AS m
JOIN sessions AS s ON s.id = m.session_id
WHERE m.state = 'live'
  AND (:source IS NULL OR s.source = :source)
  AND NOT EXISTS (SELECT 1 FROM json_each(:words) AS w WHERE m.content NOT LIKE '%' || w.value || '%')
ORDER BY m.id DESC

-- name: search_live_in
-- search_live within the sessions :ids (a JSON array): each session's live rows
-- from the unique index (CROSS JOIN keeps that order), not a walk over every row.
SELECT m.session_id, m.seq, m.role, m.content
FROM json_each(:ids) AS i
CROSS JOIN messages AS m
JOIN sessions AS s ON s.id = m.session_id
WHERE m.session_id = i.value
  AND m.state = 'live'
  AND m.seq >= s.live_from
  AND (:source IS NULL OR s.source = :source)
  AND NOT EXISTS (SELECT 1 FROM json_each(:words) AS w WHERE m.content NOT LIKE '%' || w.value || '%')
ORDER BY m.id DESC

-- name: get_compaction
-- One compaction record by id.
SELECT * FROM compactions WHERE id = :id

-- name: legacy_replaced_rows
-- A compaction from before version 7 recorded no range: the archived rows above
-- the previous compaction's watermark of its session.
SELECT * FROM messages
WHERE session_id = :session_id AND seq <= :last AND state IN ('compacted', 'pruned')
  AND seq > coalesce((SELECT max(k.watermark) FROM compactions AS k
                      WHERE k.session_id = :session_id AND k.id < :id), 0)
ORDER BY seq

-- name: rows_in_range
-- A session's rows with seqs in a range, in seq order.
SELECT * FROM messages WHERE session_id = :session_id AND seq BETWEEN :first AND :last ORDER BY seq

-- name: usage
-- The recorded usage (persistence._usage) of the sessions :ids (a JSON array; NULL:
-- every session) of :source (NULL: any), summed per kind and model: messages in
-- every state (a retracted or compacted message's call was made all the same) and
-- compactions. A copy records none, so each call counts once.
SELECT 'message' AS kind, json_extract(m.usage, '$.model') AS model,
       sum(json_extract(m.usage, '$.input_tokens')) AS input_tokens,
       sum(json_extract(m.usage, '$.output_tokens')) AS output_tokens
FROM messages AS m JOIN sessions AS s ON s.id = m.session_id
WHERE m.usage IS NOT NULL
  AND (:ids IS NULL OR m.session_id IN (SELECT value FROM json_each(:ids)))
  AND (:source IS NULL OR s.source = :source)
GROUP BY model
UNION ALL
SELECT 'compaction', json_extract(c.usage, '$.model'),
       sum(json_extract(c.usage, '$.input_tokens')), sum(json_extract(c.usage, '$.output_tokens'))
FROM compactions AS c JOIN sessions AS s ON s.id = c.session_id
WHERE c.usage IS NOT NULL
  AND (:ids IS NULL OR c.session_id IN (SELECT value FROM json_each(:ids)))
  AND (:source IS NULL OR s.source = :source)
GROUP BY 2
