-- session-actors SQLite schema, version 9: lease tokens never restart.
--
-- Erasing a lineage deletes its lease rows, so a conversation started again under
-- the same id would take its first lease with token 1 again, and a holder of the
-- erased conversation's lease could renew or release the new one. The floor
-- remembers the highest token a deleted lease row had (a trigger keeps it, so no
-- code path can forget), and a new lease row starts above it.
CREATE TABLE lease_token_floor (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    token INTEGER NOT NULL
);
INSERT INTO lease_token_floor (one, token) VALUES (1, 0);

CREATE TRIGGER leases_keep_token_floor AFTER DELETE ON leases
BEGIN
    UPDATE lease_token_floor SET token = max(token, OLD.token);
END;
