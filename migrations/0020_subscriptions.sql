-- Subscriptions, the second reconciled object (docs/subscriptions.md). The
-- reconciler's own tables only: the application's subscriptions table is
-- never altered here (`migrate` adds at most a lookup index on its
-- subscription id column, CONCURRENTLY, outside this file).
--
-- 1. A finding may name a subscription row (`subscription_id`, the row's key
--    as text, whatever its type) and its Stripe subscription
--    (`stripe_subscription_id`); one open finding per (row, kind), and per
--    (Stripe subscription, kind) when no row names it (missing locally).
-- 2. The cursor, lease, run history, outbox and findings history are the
--    existing tables, keyed by the job's name (`subscriptions-vs-stripe`).
-- 3. `reconciliation_subscription_state`: what the scan last confirmed of a
--    row (the lag of `status` and the metrics), keyed by job and row key.
-- 4. The review view and its `differs` carry subscription findings, with
--    their Dashboard link (`/subscriptions/sub_…`); columns are added at the
--    end, never renamed or removed.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS subscription_id text;
ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS stripe_subscription_id text;

ALTER TABLE reconciliation_findings DROP CONSTRAINT IF EXISTS reconciliation_findings_names_something;
-- NOT VALID: existing rows were checked by the earlier constraint; no table
-- scan under the lock.
ALTER TABLE reconciliation_findings ADD CONSTRAINT reconciliation_findings_names_something
    CHECK (payment_id IS NOT NULL OR stripe_payment_intent_id IS NOT NULL
           OR subscription_id IS NOT NULL OR stripe_subscription_id IS NOT NULL) NOT VALID;

CREATE UNIQUE INDEX IF NOT EXISTS reconciliation_findings_open_subscription
    ON reconciliation_findings (subscription_id, kind)
    WHERE resolved_at IS NULL AND subscription_id IS NOT NULL;

CREATE UNIQUE INDEX IF NOT EXISTS reconciliation_findings_open_stripe_subscription
    ON reconciliation_findings (stripe_subscription_id, kind)
    WHERE resolved_at IS NULL AND subscription_id IS NULL AND payment_id IS NULL
      AND stripe_subscription_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS reconciliation_subscription_state (
    job                    text        NOT NULL,
    subscription_id        text        NOT NULL,
    stripe_subscription_id text,
    observed_status        text,
    first_seen_at          timestamptz NOT NULL DEFAULT now(),
    last_reconciled_at     timestamptz,
    PRIMARY KEY (job, subscription_id)
);

CREATE INDEX IF NOT EXISTS reconciliation_subscription_state_lag
    ON reconciliation_subscription_state (job, (coalesce(last_reconciled_at, first_seen_at)));

-- The history trigger: a subscription finding reopens an earlier resolved
-- one of the same row (or Stripe subscription) and kind, as payments' do.
CREATE OR REPLACE FUNCTION reconciliation_findings_record_history()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    actor text := coalesce(nullif(current_setting('application_name', true), ''), current_user);
    earlier bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        SELECT max(r.id) INTO earlier FROM reconciliation_findings r
         WHERE r.id <> NEW.id AND r.kind = NEW.kind AND r.resolved_at IS NOT NULL
           AND ((NEW.payment_id IS NOT NULL AND r.payment_id = NEW.payment_id)
             OR (NEW.subscription_id IS NOT NULL AND r.subscription_id = NEW.subscription_id)
             OR (NEW.payment_id IS NULL AND r.payment_id IS NULL
                 AND NEW.subscription_id IS NULL AND r.subscription_id IS NULL
                 AND (r.stripe_payment_intent_id = NEW.stripe_payment_intent_id
                      OR r.stripe_subscription_id = NEW.stripe_subscription_id)));
        INSERT INTO reconciliation_findings_history
               (finding_id, what, who, note, external_status, details)
        VALUES (NEW.id, CASE WHEN earlier IS NULL THEN 'detected' ELSE 'reopened' END, actor,
                CASE WHEN earlier IS NULL THEN NULL ELSE 'reopens finding ' || earlier END,
                NEW.external_status, NEW.details);
        RETURN NEW;
    END IF;
    IF OLD.resolved_at IS NULL AND NEW.resolved_at IS NOT NULL THEN
        INSERT INTO reconciliation_findings_history
               (finding_id, what, who, resolution, note, external_status, details)
        VALUES (NEW.id, 'resolved', coalesce(NEW.resolved_by, actor), NEW.resolution,
                NEW.resolution_note, NEW.external_status, NEW.details);
    ELSIF OLD.resolved_at IS NOT NULL AND NEW.resolved_at IS NULL THEN
        INSERT INTO reconciliation_findings_history
               (finding_id, what, who, external_status, details)
        VALUES (NEW.id, 'reopened', actor, NEW.external_status, NEW.details);
    ELSIF NEW.external_status IS DISTINCT FROM OLD.external_status
       OR NEW.details IS DISTINCT FROM OLD.details THEN
        INSERT INTO reconciliation_findings_history
               (finding_id, what, who, external_status, details)
        VALUES (NEW.id, 'refreshed', actor, NEW.external_status, NEW.details);
    END IF;
    RETURN NEW;
END
$$;

-- What differs, for subscription kinds: the scan stores it in
-- `details.differs` ({field, local, stripe}); every other kind as before.
CREATE OR REPLACE FUNCTION reconciliation_subscription_differs(
    kind text, local_status text, external_status text, details jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN kind LIKE 'subscription\_%' AND jsonb_typeof(details->'differs') = 'object'
            THEN details->'differs'
        WHEN kind LIKE 'subscription\_%'
            THEN jsonb_build_object('field', 'status', 'local', local_status, 'stripe', external_status)
        ELSE reconciliation_differs(kind, local_status, external_status, details)
    END
$$;

CREATE OR REPLACE VIEW reconciliation_review AS
SELECT f.id                                                     AS finding_id,
       f.kind,
       CASE WHEN f.kind IN ('refunded', 'refunded_locally_not_externally', 'disputed',
                            'amount_mismatch', 'currency_mismatch', 'duplicate_payment_intent',
                            'missing_locally', 'subscription_missed_cancel',
                            'subscription_access_without_payment', 'subscription_missing_locally')
                 OR (f.kind IN ('subscription_price_mismatch', 'subscription_quantity_mismatch')
                     AND coalesce(f.details->>'money_at_risk', '') = 'true')
                 THEN 'money_at_risk'
            WHEN f.kind = 'subscription_paid_but_blocked' THEN 'customer_locked_out'
            WHEN f.kind IN ('missed_success', 'missed_cancel', 'subscription_status_mismatch',
                            'subscription_period_stale', 'subscription_cancel_scheduled')
                 THEN 'repairable'
            ELSE 'needs_review' END                             AS severity,
       (f.kind IN ('refunded', 'refunded_locally_not_externally', 'disputed',
                   'amount_mismatch', 'currency_mismatch', 'duplicate_payment_intent',
                   'missing_locally', 'subscription_missed_cancel',
                   'subscription_access_without_payment', 'subscription_missing_locally')
        OR (f.kind IN ('subscription_price_mismatch', 'subscription_quantity_mismatch')
            AND coalesce(f.details->>'money_at_risk', '') = 'true')) AS money_at_risk,
       f.payment_id::text                                       AS payment_key,
       p.order_id                                               AS order_id,
       coalesce(nullif(p.payment_intent_id, ''), f.stripe_payment_intent_id)::text AS payment_intent_id,
       f.stripe_account_id,
       f.local_status,
       f.external_status                                        AS stripe_status,
       reconciliation_subscription_differs(f.kind, f.local_status, f.external_status, f.details) AS differs,
       f.details,
       f.detected_at,
       f.last_seen_at,
       f.resolved_at,
       f.resolution,
       f.resolved_by,
       f.resolution_note,
       CASE WHEN (f.stripe_account_id IS NOT NULL AND f.stripe_account_id <> ''
                  AND f.stripe_account_id !~ '^acct_[A-Za-z0-9]+$') THEN NULL
            WHEN coalesce(nullif(p.payment_intent_id, ''), f.stripe_payment_intent_id) ~ '^pi_[A-Za-z0-9]+$'
            THEN 'https://dashboard.stripe.com/'
                 || coalesce(nullif(f.stripe_account_id, '') || '/', '')
                 || 'payments/' || coalesce(nullif(p.payment_intent_id, ''), f.stripe_payment_intent_id)
            WHEN f.checkout_session_id ~ '^cs_[A-Za-z0-9_]+$'
            THEN 'https://dashboard.stripe.com/'
                 || coalesce(nullif(f.stripe_account_id, '') || '/', '')
                 || 'search?query=' || f.checkout_session_id
            WHEN f.stripe_subscription_id ~ '^sub_[A-Za-z0-9]+$'
            THEN 'https://dashboard.stripe.com/'
                 || coalesce(nullif(f.stripe_account_id, '') || '/', '')
                 || 'subscriptions/' || f.stripe_subscription_id
       END                                                      AS dashboard_url,
       f.checkout_session_id,
       f.subscription_id                                        AS subscription_key,
       f.stripe_subscription_id
  FROM reconciliation_findings f
  LEFT JOIN LATERAL reconciliation_payment_ref(f.payment_id) p ON f.payment_id IS NOT NULL;
