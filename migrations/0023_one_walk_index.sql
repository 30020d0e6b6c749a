-- One `(created_at, payment_id)` index on the state table (docs/keys.md,
-- "The walk"). Two identical ones were kept, `reconciliation_payment_state_created`
-- and `reconciliation_payment_state_walk`, and every state row a batch
-- registers or confirms wrote an entry into both: one is dropped, the walk's
-- stays and serves every read of either. Our own tables only: `payments` is
-- never altered.
SET LOCAL lock_timeout = '10s';

DROP INDEX IF EXISTS reconciliation_payment_state_created;
