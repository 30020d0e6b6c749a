-- Per-PaymentIntent retries of the events feed (issue 21: "no backlog can stop
-- the events job from making progress").
--
-- An event the job could not decide yet (its row was updated within the grace
-- window, a succeeded PaymentIntent has no row yet, Stripe did not answer for
-- its PaymentIntent, or the row changed while Stripe was asked) used to hold
-- the whole feed's position at that event for grace + 1 h: a few PaymentIntents
-- Stripe kept failing for made every run re-read the whole burst behind them.
-- The position now moves to the slice's end and only that PaymentIntent waits
-- here, with the newest event that named it; each run reads the waiting ones
-- again first. A PaymentIntent leaves when a read settles it, or when its event
-- is older than grace + 1 h (the scan covers its row from then on).
SET LOCAL lock_timeout = '10s';

CREATE TABLE IF NOT EXISTS reconciliation_events_retry (
    -- `<RECONCILER_JOB>-events`, as in reconciliation_events_position.
    job                      text        NOT NULL,
    stripe_payment_intent_id text        NOT NULL,
    -- The connected account whose feed named it (Connect, issue 24); NULL:
    -- the platform's own feed. Its orphan read carries `Stripe-Account`.
    stripe_account_id        text,
    -- The newest event that named the PaymentIntent: what the plan needs to
    -- decide it again (its object follows from the type).
    event_id                 text        NOT NULL,
    event_type               text        NOT NULL,
    event_created            timestamptz NOT NULL,
    event_status             text,
    event_metadata           jsonb       NOT NULL DEFAULT '{}',
    -- Why it waits: in_grace, no_row_yet, stripe_unanswered, changed_while_asked.
    reason                   text        NOT NULL,
    -- Runs that held it (1 for the run that first did).
    attempts                 integer     NOT NULL DEFAULT 1,
    first_held_at            timestamptz NOT NULL DEFAULT now(),
    last_held_at             timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job, stripe_payment_intent_id)
);
