-- session-actors PostgreSQL schema, version 6: search, and where a compaction's rows went.
--
-- 1. Full-text search over message text, kept by the database: a GIN index on the
-- text's tsvector. The text is the content's string, or the "text" of each part
-- of multi-part content (message_text). The 'simple' configuration: no stemming
-- and no stop words, so every language is treated alike. Pruned rows hold empty
-- content, so retention empties their entries too.
-- The text of a JSON string is the JSON with its escapes as spaces (no JSON
-- parsing: a string holding NUL, \u0000 in JSON, has no jsonb form, and an append
-- must never fail for its index); multi-part content is parsed, unless it holds
-- \u0000, when its JSON with escapes as spaces is indexed instead.
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
    USING gin (to_tsvector('simple'::regconfig, coalesce(message_text(content), '')));

-- 2. Where a compaction's rows went: the first seq of the live rows it archived
-- (the session's live_from at the commit), and the first seq and count of the
-- summary rows it wrote (into the session, or its child on a rotation; the
-- carried tail follows them). NULL for compactions committed before version 6.
ALTER TABLE compactions ADD COLUMN replaced_from bigint;
ALTER TABLE compactions ADD COLUMN written_from bigint;
ALTER TABLE compactions ADD COLUMN summary_count bigint;
