-- max(payments.id) when each run started: G (new rows per hour) is the growth
-- of this number between runs, measured without scanning payments.
ALTER TABLE reconciliation_runs ADD COLUMN IF NOT EXISTS max_payment_id bigint;
