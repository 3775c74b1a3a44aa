-- session-actors PostgreSQL schema, version 13: announced turn holders.
--
-- A registry on a direct connection (not behind PgBouncer) announces its holder
-- name: it holds a session-level advisory lock named after it on a connection of
-- its own for its whole life, and records the name here. Another registry held
-- behind one of its turns asks whether that lock is still held: a holder recorded
-- here whose lock is free has lost its database session (killed, crashed, cut off)
-- and its turn is sealed at once instead of after its lease. A name not recorded
-- here was never announced (a registry behind PgBouncer, say): nobody can tell, its
-- lease stands. A row goes when its holder's registry closes.
CREATE TABLE holders (
    holder       text PRIMARY KEY,
    announced_at double precision NOT NULL
);
