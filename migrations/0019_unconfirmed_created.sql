-- Rows seen but never confirmed, in a `(created_at, id)` walk's order
-- (issue 31, docs/keys.md): each batch reads the few of them behind the
-- cursor with one range here, as 0010's `reconciliation_payment_state_unconfirmed`
-- serves a walk by key. Without it a batch probed every unconfirmed row of
-- the table (in a first cycle, every row ahead of the cursor).
SET LOCAL lock_timeout = '10s';

CREATE INDEX IF NOT EXISTS reconciliation_payment_state_unconfirmed_created
    ON reconciliation_payment_state (created_at, payment_id) WHERE last_reconciled_at IS NULL;
