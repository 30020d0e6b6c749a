-- Findings beyond status (DESIGN.md "Beyond status"): what a person needs to
-- judge a finding (amounts, currency, refund share, deadlines) and when the
-- scan last saw the drift, so the review queue shows Stripe's current state.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS details jsonb;
ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS last_seen_at timestamptz;

-- Per-payment lookups of findings (blocking kinds, stale findings, the
-- acknowledgement of a manual resolution) are index lookups.
CREATE INDEX IF NOT EXISTS reconciliation_findings_payment
    ON reconciliation_findings (payment_id, kind);

-- Rows Stripe could not answer for, one row each while they keep failing:
-- after RECONCILER_UNVERIFIABLE_CYCLES consecutive cycles they get a
-- `persistently_unverifiable` finding with the last error. A row is deleted
-- as soon as Stripe answers for its payment.
CREATE TABLE IF NOT EXISTS reconciliation_unverifiable (
    job              text        NOT NULL,
    payment_id       bigint      NOT NULL,
    first_failed_at  timestamptz NOT NULL DEFAULT now(),
    last_failed_at   timestamptz NOT NULL DEFAULT now(),
    -- cycle_started_at of the cursor when it last failed: one count per cycle.
    last_cycle       timestamptz NOT NULL,
    cycles           int         NOT NULL DEFAULT 1,
    last_error       text,
    PRIMARY KEY (job, payment_id)
);
