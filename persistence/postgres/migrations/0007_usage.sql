-- session-actors PostgreSQL schema, version 7: token usage.
--
-- The usage of the model call that wrote a message, and of the compressor's calls
-- for a compaction: JSON text {"input_tokens": n, "output_tokens": n, "model": m}
-- or NULL. A copy (a compaction's carried tail, a branch's prefix) leaves it NULL:
-- a call is counted once, on the row it was recorded on (store.usage).
ALTER TABLE messages ADD COLUMN usage text;
ALTER TABLE compactions ADD COLUMN usage text;
