-- session-actors schema, version 8 (SQLite): token usage.
--
-- The usage of the model call that wrote a message, and of the compressor's calls
-- for a compaction: JSON text {"input_tokens": n, "output_tokens": n, "model": m}
-- or NULL. A copy (a compaction's carried tail, a branch's prefix) leaves it NULL:
-- a call is counted once, on the row it was recorded on (store.usage).
ALTER TABLE messages ADD COLUMN usage TEXT;
ALTER TABLE compactions ADD COLUMN usage TEXT;
