-- The reconciler's own state per payment (DESIGN.md, Turn 3 contract: "the
-- scan writes nothing into the application's rows"). What Stripe said and when
-- it last confirmed a payment used to be stamped on `payments` itself: one
-- non-HOT update per row per cycle on the application's hottest table, every
-- row trigger fired, CDC re-exporting the whole table. It now lives here, keyed
-- by `payments.id`.
--
-- No foreign key to `payments`: it would put a check (or a cascade) on the
-- application's DELETEs. The scan forgets rows of deleted payments as its
-- cursor passes their ids.
--
-- `created_at` is the payment's, copied when the row is first seen, so the lag
-- `now() - min(coalesce(last_reconciled_at, created_at))` is one lookup on
-- `reconciliation_payment_state_lag` without touching `payments`.
SET LOCAL lock_timeout = '10s';

CREATE TABLE IF NOT EXISTS reconciliation_payment_state (
    payment_id               bigint      PRIMARY KEY,
    created_at               timestamptz NOT NULL,
    observed_external_status text,
    last_reconciled_at       timestamptz
);

-- Every existing payment gets its row, so that on an existing install every
-- row counts in the lag from the first `status` on, and the values the scan
-- stamped on `payments` before are carried over. The seed's two columns may be
-- absent (an application's own table): copy them only where they exist. Runs
-- only for integer ids (a uuid id is refused by `migrate` before this).
DO $$
DECLARE
    stamped boolean;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                    WHERE table_schema = current_schema() AND table_name = 'payments'
                      AND column_name = 'id'
                      AND data_type IN ('smallint', 'integer', 'bigint')) THEN
        RETURN;
    END IF;
    SELECT count(*) = 2 INTO stamped FROM information_schema.columns
     WHERE table_schema = current_schema() AND table_name = 'payments'
       AND column_name IN ('observed_external_status', 'last_reconciled_at');
    IF stamped THEN
        EXECUTE 'INSERT INTO reconciliation_payment_state
                     (payment_id, created_at, observed_external_status, last_reconciled_at)
                 SELECT id, created_at, observed_external_status, last_reconciled_at FROM payments
                 ON CONFLICT (payment_id) DO NOTHING';
    ELSE
        EXECUTE 'INSERT INTO reconciliation_payment_state (payment_id, created_at)
                 SELECT id, created_at FROM payments
                 ON CONFLICT (payment_id) DO NOTHING';
    END IF;
END
$$;

-- The lag: min(coalesce(last_reconciled_at, created_at)) is one index lookup.
CREATE INDEX IF NOT EXISTS reconciliation_payment_state_lag
    ON reconciliation_payment_state ((coalesce(last_reconciled_at, created_at)));

-- Rows seen but never confirmed with Stripe (in the grace window or
-- UNVERIFIABLE when the cursor passed): each batch picks a few behind the
-- cursor with one range lookup here. Rows leave it once confirmed.
CREATE INDEX IF NOT EXISTS reconciliation_payment_state_unconfirmed
    ON reconciliation_payment_state (payment_id) WHERE last_reconciled_at IS NULL;
