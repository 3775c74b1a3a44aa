-- session-actors SQLite schema, version 10: per-row checksums.
--
-- The CRC-32 of a message row's text, computed by the writer as it inserts the row
-- (persistence/sqlite/_checksums.py says what it covers), so fsck can tell a row
-- whose bytes changed on disk. NULL for rows written before this version and for
-- pruned rows.
ALTER TABLE messages ADD COLUMN checksum INTEGER;
