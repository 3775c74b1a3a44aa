-- session-actors PostgreSQL schema, version 9: lease tokens never restart.
--
-- Erasing a lineage deletes its lease rows, so a conversation started again under
-- the same id would take its first lease with token 1 again, and a holder of the
-- erased conversation's lease could renew or release the new one. The floor
-- remembers the highest token a deleted lease row had (a trigger keeps it, so no
-- code path can forget), and a new lease row starts above it.
CREATE TABLE lease_token_floor (
    one boolean PRIMARY KEY DEFAULT true CHECK (one),
    token bigint NOT NULL
);
INSERT INTO lease_token_floor (token) VALUES (0);

CREATE FUNCTION leases_keep_token_floor() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE lease_token_floor SET token = greatest(token, OLD.token);
    RETURN OLD;
END
$$;

CREATE TRIGGER leases_keep_token_floor AFTER DELETE ON leases
FOR EACH ROW EXECUTE FUNCTION leases_keep_token_floor();
