-- session-actors schema, version 5 (SQLite): an append writes less.
--
-- 1. A session's seq counter follows its rows.
-- A group-commit batch used to move its sessions' counters with an UPDATE of its
-- own before its INSERT. Every statement costs the single writer far more than its
-- SQLite work (Python's sqlite3 lets go of the GIL five times a statement, and under
-- many callers the writer waits to win it back each time), so the counters now move
-- inside the INSERT: past each row inserted at or above the counter. Writes that
-- reserve their seqs first (a lone append, a compaction, a rotation's copies) insert
-- below the counter they moved: the guard leaves it alone. Seqs stay gapless and
-- are still handed out from next_seq under the write lock; the trigger inserts
-- nothing into messages, so AUTOINCREMENT still gives a statement's rows
-- consecutive ids. (A migration that rebuilds the messages table must create it again.)

CREATE TRIGGER messages_next_seq AFTER INSERT ON messages
BEGIN
    UPDATE sessions SET next_seq = NEW.seq + 1 WHERE id = NEW.session_id AND next_seq <= NEW.seq;
END;

-- 2. The indexes on origin_id and archived_at hold only the rows that have one. An
-- appended row has neither (NULL until a compaction copies or archives it), yet each
-- of its full indexes took an entry for it: two B-tree inserts an append for
-- nothing. Their readers name a value (erasure's foreign-key check of origin_id =
-- ?, retention's archived_at <= ?), which implies NOT NULL, so they still use them.

DROP INDEX messages_origin_idx;
CREATE INDEX messages_origin_idx ON messages (origin_id) WHERE origin_id IS NOT NULL;
DROP INDEX messages_archived_idx;
CREATE INDEX messages_archived_idx ON messages (archived_at) WHERE archived_at IS NOT NULL;
