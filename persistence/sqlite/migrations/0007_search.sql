-- session-actors schema, version 7 (SQLite): search, where a compaction's rows went, branches.
--
-- 1. A full-text index of the archive (FTS5), kept by the database itself: a row
-- is indexed when it leaves the live transcript by compaction (compacted, or
-- superseded by its copy), forgotten when it is erased or pruned. Appends index
-- nothing: they stay as cheap as before, and the live transcript is searched by
-- scanning it (persistence/sqlite/_recall.py). The indexed text is the content's
-- string, or the "text" of each part of multi-part content; a message without
-- text (an assistant's bare tool calls) has no entry. Content holding a NUL
-- (\u0000 in its JSON) is indexed as its JSON with the common escapes as spaces:
-- FTS5 would end a decoded text at the NUL. The rowid is the message id.
-- unicode61, case folded, no stemming: every language is treated alike, and as
-- PostgreSQL's 'simple' configuration (diacritics count).
CREATE VIRTUAL TABLE message_search USING fts5 (text, tokenize = 'unicode61 remove_diacritics 0');

CREATE TRIGGER message_search_archive AFTER UPDATE OF state ON messages
WHEN OLD.state = 'live' AND NEW.state IN ('compacted', 'superseded')
     AND json_type(NEW.content) IN ('text', 'array')
BEGIN
    INSERT INTO message_search (rowid, text)
    VALUES (NEW.id, CASE
               WHEN instr(NEW.content, '\u0000') > 0 THEN  -- NUL: FTS5 would end the text there
                   replace(replace(replace(replace(replace(NEW.content, '\u0000', ' '), '\n', ' '), '\t', ' '), '\r', ' '), '\"', ' ')
               WHEN json_type(NEW.content) = 'text' THEN json_extract(NEW.content, '$')
               ELSE (SELECT group_concat(json_extract(p.value, '$.text'), ' ')
                     FROM json_each(NEW.content) AS p
                     WHERE json_type(p.value, '$.text') = 'text')
           END);
END;

CREATE TRIGGER message_search_erase AFTER DELETE ON messages
WHEN OLD.state IN ('compacted', 'superseded')
BEGIN
    DELETE FROM message_search WHERE rowid = OLD.id;
END;

CREATE TRIGGER message_search_prune AFTER UPDATE OF state ON messages
WHEN NEW.state = 'pruned' AND OLD.state IN ('compacted', 'superseded')
BEGIN
    DELETE FROM message_search WHERE rowid = OLD.id;
END;

INSERT INTO message_search (rowid, text)
SELECT id, CASE
               WHEN instr(content, '\u0000') > 0 THEN  -- NUL: FTS5 would end the text there
                   replace(replace(replace(replace(replace(content, '\u0000', ' '), '\n', ' '), '\t', ' '), '\r', ' '), '\"', ' ')
               WHEN json_type(content) = 'text' THEN json_extract(content, '$')
               ELSE (SELECT group_concat(json_extract(p.value, '$.text'), ' ')
                     FROM json_each(content) AS p
                     WHERE json_type(p.value, '$.text') = 'text')
           END
FROM messages
WHERE state IN ('compacted', 'superseded') AND json_type(content) IN ('text', 'array');

-- 2. Where a compaction's rows went: the first seq of the live rows it archived
-- (the session's live_from at the commit), and the first seq and count of the
-- summary rows it wrote (into the session, or its child on a rotation; the
-- carried tail follows them). NULL for compactions committed before version 7.
ALTER TABLE compactions ADD COLUMN replaced_from INTEGER;
ALTER TABLE compactions ADD COLUMN written_from INTEGER;
ALTER TABLE compactions ADD COLUMN summary_count INTEGER;

-- 3. Branches: a session started from a prefix of another's live transcript
-- (store.branch) records where it came from. No foreign key: the session it came
-- from may be erased, and the branch, a conversation of its own, stays.
ALTER TABLE sessions ADD COLUMN branch_of_session TEXT;
ALTER TABLE sessions ADD COLUMN branch_of_seq INTEGER;
