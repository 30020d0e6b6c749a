-- The events feed (DESIGN.md "Reads": `stripe-reconciler events`).
--
-- 1. A finding may name a PaymentIntent instead of a payment: `missing_locally`
--    is money Stripe took while no `payments` row points at the PaymentIntent.
--    `payment_id` becomes nullable; such a finding carries the PaymentIntent id,
--    and a second partial unique index keeps one open finding per
--    (PaymentIntent, kind) when there is no payment, as
--    `reconciliation_findings_open` does per (payment, kind).
-- 2. The events job's position: one row per events job (`<RECONCILER_JOB>-events`),
--    with the lease that keeps a second `events` run out.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_findings ALTER COLUMN payment_id DROP NOT NULL;
ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS stripe_payment_intent_id text;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conname = 'reconciliation_findings_names_something') THEN
        -- NOT VALID: every existing row has a payment_id; no table scan under the lock.
        ALTER TABLE reconciliation_findings ADD CONSTRAINT reconciliation_findings_names_something
            CHECK (payment_id IS NOT NULL OR stripe_payment_intent_id IS NOT NULL) NOT VALID;
    END IF;
END
$$;

CREATE UNIQUE INDEX IF NOT EXISTS reconciliation_findings_open_intent
    ON reconciliation_findings (stripe_payment_intent_id, kind)
    WHERE resolved_at IS NULL AND payment_id IS NULL;

CREATE TABLE IF NOT EXISTS reconciliation_events_position (
    job                  text        PRIMARY KEY,
    -- Every event created before this instant has been read and its findings
    -- committed (Stripe's clock, second precision). NULL: never ran.
    covered_until        timestamptz,
    -- The newest event processed so far, for operators.
    newest_event_id      text,
    newest_event_created timestamptz,
    last_success_at      timestamptz,
    lease_owner          text,
    lease_expires_at     timestamptz,
    updated_at           timestamptz NOT NULL DEFAULT now()
);
