-- session-actors schema, version 5 (SQLite): a session's seq counter follows its rows.
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
