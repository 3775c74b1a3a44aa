-- session-actors PostgreSQL schema, version 11: search finds identifiers.
--
-- A text is searched as its words: runs of letters and digits, case-folded, the
-- words SQLite's unicode61 tokenizer keeps and persistence._recall matches in live
-- rows. The default parser alone reads some identifiers as one token
-- (ana@example.com, /var/log/app.log, v2.1.3: no part of them is a word of the
-- text) and others as a word and a signed number (ZX-4417: zx and -4417, so
-- neither 4417 nor the whole is one), so every ASCII punctuation character is a
-- space before the parser reads a text. A query's term of several words (ZX-4417:
-- zx 4417) is found where its words stand next to each other, in order.

-- The text with each ASCII punctuation character (the four ranges of them) as a
-- space: the parser then reads words and spaces only, one token a word. A regular
-- expression: translate() would cost more than the parser itself.
CREATE FUNCTION search_text(doc text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN regexp_replace(doc, '[!-/:-@[-`{-~]', ' ', 'g');

-- The words of a message's text (message_text) as a tsvector: what the index holds.
CREATE FUNCTION search_vector(content text) RETURNS tsvector
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN to_tsvector('simple'::regconfig, search_text(coalesce(message_text(content), '')));

-- A regular expression for a term of several words (its words joined by spaces:
-- 'zx 4417'): the words in order, nothing but characters other than letters and
-- digits between them. A tsvector's positions would do it for short texts only:
-- they stop at 16,383 and at 256 for one word.
CREATE FUNCTION phrase_pattern(phrase text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN '(^|[^[:alnum:]])' || replace(phrase, ' ', '[^[:alnum:]]+') || '($|[^[:alnum:]])';

-- The patterns of some terms (a text[] of them), computed once for a query.
CREATE FUNCTION phrase_patterns(phrases text[]) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE STRICT
RETURN ARRAY(SELECT phrase_pattern(p.phrase) FROM unnest(phrases) AS p (phrase));

-- Whether a message's text holds every one of phrases, case-insensitively; true for
-- none without reading the text. A plain expression: the planner inlines it, so
-- the patterns of a query's constant phrases are made once.
CREATE FUNCTION holds_phrases(content text, phrases text[]) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN cardinality(phrases) = 0
    OR coalesce(message_text(content), '') ~* ALL (phrase_patterns(phrases));

-- The archive's index (its compacted and superseded rows), over their words.
DROP INDEX messages_search_idx;
CREATE INDEX messages_search_idx ON messages USING gin (search_vector(content))
    WHERE state IN ('compacted', 'superseded');
