-- session-actors PostgreSQL schema, version 8: call deadlines on the server's clock.
--
-- A client stops waiting for a frozen backend at its call's deadline, but the
-- backend may still run what it had received once it resumes. Every write carries
-- its deadline (epoch seconds on this server's clock, NULL for none) and calls
-- this function just before it commits: past the deadline, the write is refused
-- (query_canceled) and rolls back, so a call reported failed never applies later.
CREATE FUNCTION call_deadline_check(until double precision) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    IF until IS NOT NULL AND extract(epoch FROM clock_timestamp()) > until THEN
        RAISE EXCEPTION 'the call''s deadline passed before this write could commit; nothing was written'
            USING ERRCODE = 'query_canceled';
    END IF;
    RETURN true;
END
$$;
