-- Reading the archive back (SQLite): search and what a compaction did.

-- name: search_messages
-- Ranked matches of :query (FTS5 syntax, built by persistence._recall). A text
-- carried across compactions is one hit, at its newest copy: a row with a copy
-- in its own conversation is passed over. Retracted and pruned rows never match.
-- :ids (a JSON array) limits it to some sessions; NULL means every session.
SELECT m.session_id, m.seq, m.role, m.state,
       snippet(message_search, 0, '[', ']', '…', 16) AS snippet,
       bm25(message_search) AS rank
FROM message_search
JOIN messages AS m ON m.id = message_search.rowid
JOIN sessions AS s ON s.id = m.session_id
WHERE message_search MATCH :query
  AND m.state IN ('live', 'compacted', 'superseded')
  AND (:archived OR m.state = 'live')
  AND (:source IS NULL OR s.source = :source)
  AND (:ids IS NULL OR m.session_id IN (SELECT value FROM json_each(:ids)))
  AND NOT EXISTS (SELECT 1 FROM messages AS c JOIN sessions AS cs ON cs.id = c.session_id
                  WHERE c.origin_id = m.id AND cs.incarnation = s.incarnation)
ORDER BY rank, m.id
LIMIT :limit

-- name: get_compaction
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
SELECT * FROM messages WHERE session_id = :session_id AND seq BETWEEN :first AND :last ORDER BY seq
