-- session-actors PostgreSQL schema, version 6: search, where a compaction's rows went, branches.
--
-- 1. Full-text search over the archive, kept by the database: a GIN index on the
-- text's tsvector of every row that left the live transcript by compaction
-- (compacted, or superseded by its copy). An append writes a live row, which the
-- index's predicate leaves out: appends stay as cheap as before, and the live
-- transcript is searched by scanning it (search_live in recall.sql). Pruned rows
-- leave the predicate. The 'simple' configuration: no stemming and no stop words,
-- so every language is treated alike.
--
-- The text (message_text): of a JSON string, the JSON with its escapes as spaces
-- (no JSON parsing: a string holding NUL, \u0000 in JSON, has no jsonb form, and a
-- compaction must never fail for its index); of multi-part content, the "text" of
-- each part, unless it holds \u0000, when its JSON with escapes as spaces.
CREATE FUNCTION message_text(content text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN CASE
    WHEN left(content, 1) = '[' AND strpos(content, '\u0000') = 0 THEN
        (SELECT string_agg(p.value ->> 'text', ' ')
         FROM jsonb_array_elements(content::jsonb) AS p
         WHERE jsonb_typeof(p.value -> 'text') = 'string')
    WHEN left(content, 1) IN ('"', '[') THEN
        regexp_replace(content, '\\(["\\/bfnrt]|u[0-9a-fA-F]{4})', ' ', 'g')
END;

CREATE INDEX messages_search_idx ON messages
    USING gin (to_tsvector('simple'::regconfig, coalesce(message_text(content), '')))
    WHERE state IN ('compacted', 'superseded');

-- 2. Where a compaction's rows went: the first seq of the live rows it archived
-- (the session's live_from at the commit), and the first seq and count of the
-- summary rows it wrote (into the session, or its child on a rotation; the
-- carried tail follows them). NULL for compactions committed before version 6.
ALTER TABLE compactions ADD COLUMN replaced_from bigint;
ALTER TABLE compactions ADD COLUMN written_from bigint;
ALTER TABLE compactions ADD COLUMN summary_count bigint;

-- 3. Branches: a session started from a prefix of another's live transcript
-- (store.branch) records where it came from. No foreign key: the session it came
-- from may be erased, and the branch, a conversation of its own, stays.
ALTER TABLE sessions ADD COLUMN branch_of_session text;
ALTER TABLE sessions ADD COLUMN branch_of_seq bigint;
