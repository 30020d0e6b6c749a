-- Checkout Sessions (issue 32): a finding about a payment judged by its
-- Checkout Session records the session and, once the session has one, its
-- PaymentIntent. Our own table and view only: `payments` is never altered.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS checkout_session_id text;

-- The stable interface for BI tools (docs/review.md), as 0013 made it, with
-- `checkout_session_id` added at the end (columns are added, never renamed
-- or removed). An empty PaymentIntent column of the payment (a row waiting
-- for its PaymentIntent) now gives way to the PaymentIntent the finding
-- recorded; with neither, the Dashboard link searches for the session.
CREATE OR REPLACE VIEW reconciliation_review AS
SELECT f.id                                                     AS finding_id,
       f.kind,
       CASE WHEN f.kind IN ('refunded', 'refunded_locally_not_externally', 'disputed',
                            'amount_mismatch', 'currency_mismatch', 'duplicate_payment_intent',
                            'missing_locally') THEN 'money_at_risk'
            WHEN f.kind IN ('missed_success', 'missed_cancel') THEN 'repairable'
            ELSE 'needs_review' END                             AS severity,
       f.kind IN ('refunded', 'refunded_locally_not_externally', 'disputed',
                  'amount_mismatch', 'currency_mismatch', 'duplicate_payment_intent',
                  'missing_locally')                            AS money_at_risk,
       f.payment_id::text                                       AS payment_key,
       p.order_id                                               AS order_id,
       coalesce(nullif(p.payment_intent_id, ''), f.stripe_payment_intent_id)::text AS payment_intent_id,
       f.stripe_account_id,
       f.local_status,
       f.external_status                                        AS stripe_status,
       reconciliation_differs(f.kind, f.local_status, f.external_status, f.details) AS differs,
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
       END                                                      AS dashboard_url,
       f.checkout_session_id
  FROM reconciliation_findings f
  LEFT JOIN LATERAL reconciliation_payment_ref(f.payment_id) p ON f.payment_id IS NOT NULL;
