-- The walk's progress and its own ordered copy (docs/keys.md, "The walk";
-- docs/scan.md, "Rows behind the cursor"). Our own tables only: `payments`
-- is never altered.
--
-- 1. `reconciliation_cursor.cycle_rows_done`: the rows the cursor walked in
--    the current cycle, counted by every batch's compare-and-set and set back
--    to 0 when the cycle ends. The plan, `status` and the cycle and capacity
--    figures read it on every walk, where a key's value (a uuid) says nothing
--    about how far the cycle has come.
-- 2. `reconciliation_payment_state_walk`: every state row in
--    `(created_at, payment_id)` order, the order list mode walks on a uuid or
--    text table without an index of the application's on `created_at`.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_cursor
    ADD COLUMN IF NOT EXISTS cycle_rows_done bigint NOT NULL DEFAULT 0;

CREATE INDEX IF NOT EXISTS reconciliation_payment_state_walk
    ON reconciliation_payment_state (created_at, payment_id);
