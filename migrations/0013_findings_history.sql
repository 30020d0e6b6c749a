-- The review loop (issue 33): every finding's history, the findings a
-- notification has been sent for, and the view BI tools read. Our own tables
-- only: `payments` and the application's outbox are never altered.
SET LOCAL lock_timeout = '10s';

-- History: one row per detection, refresh (Stripe's status or the details
-- changed), resolution and reopening of a finding, written by a trigger on
-- reconciliation_findings so that every writer (the scan, the events job,
-- the repair worker, `findings resolve`, and any later one) is covered.
-- Append-only: an UPDATE, DELETE or TRUNCATE is refused by the triggers below.
CREATE TABLE IF NOT EXISTS reconciliation_findings_history (
    id               bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    finding_id       bigint      NOT NULL,
    at               timestamptz NOT NULL DEFAULT clock_timestamp(),
    what             text        NOT NULL
                     CHECK (what IN ('detected', 'refreshed', 'resolved', 'reopened')),
    -- `resolved_by` for a manual resolution; otherwise the connection's
    -- application_name (`stripe-reconciler`) or, without one, the role.
    who              text,
    resolution       text,
    note             text,
    external_status  text,
    details          jsonb
);
CREATE INDEX IF NOT EXISTS reconciliation_findings_history_finding
    ON reconciliation_findings_history (finding_id, id);

CREATE OR REPLACE FUNCTION reconciliation_findings_history_append_only()
RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'reconciliation_findings_history is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$;
DROP TRIGGER IF EXISTS reconciliation_findings_history_no_change ON reconciliation_findings_history;
CREATE TRIGGER reconciliation_findings_history_no_change
    BEFORE UPDATE OR DELETE ON reconciliation_findings_history
    FOR EACH ROW EXECUTE FUNCTION reconciliation_findings_history_append_only();
DROP TRIGGER IF EXISTS reconciliation_findings_history_no_truncate ON reconciliation_findings_history;
CREATE TRIGGER reconciliation_findings_history_no_truncate
    BEFORE TRUNCATE ON reconciliation_findings_history
    FOR EACH STATEMENT EXECUTE FUNCTION reconciliation_findings_history_append_only();

-- The trigger's look-up of an earlier finding of the same PaymentIntent and
-- kind without a payment (the open-only index does not cover resolved ones).
CREATE INDEX IF NOT EXISTS reconciliation_findings_intent_kind
    ON reconciliation_findings (stripe_payment_intent_id, kind) WHERE payment_id IS NULL;

CREATE OR REPLACE FUNCTION reconciliation_findings_record_history()
RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    actor text := coalesce(nullif(current_setting('application_name', true), ''), current_user);
    earlier bigint;
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A finding of the same (payment, kind), or (PaymentIntent, kind)
        -- without a payment, resolved before: the drift came back.
        SELECT max(r.id) INTO earlier FROM reconciliation_findings r
         WHERE r.id <> NEW.id AND r.kind = NEW.kind AND r.resolved_at IS NOT NULL
           AND ((NEW.payment_id IS NOT NULL AND r.payment_id = NEW.payment_id)
             OR (NEW.payment_id IS NULL AND r.payment_id IS NULL
                 AND r.stripe_payment_intent_id = NEW.stripe_payment_intent_id));
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
        -- A refresh that only moves last_seen_at is not history.
        INSERT INTO reconciliation_findings_history
               (finding_id, what, who, external_status, details)
        VALUES (NEW.id, 'refreshed', actor, NEW.external_status, NEW.details);
    END IF;
    RETURN NEW;
END
$$;
DROP TRIGGER IF EXISTS reconciliation_findings_history ON reconciliation_findings;
CREATE TRIGGER reconciliation_findings_history
    AFTER INSERT OR UPDATE ON reconciliation_findings
    FOR EACH ROW EXECUTE FUNCTION reconciliation_findings_record_history();

-- Findings already open when this migration runs get their detection, so
-- every finding's history starts with one.
INSERT INTO reconciliation_findings_history (finding_id, at, what, who, external_status, details)
SELECT f.id, f.detected_at, 'detected', 'migration 0013', f.external_status, f.details
  FROM reconciliation_findings f
 WHERE NOT EXISTS (SELECT 1 FROM reconciliation_findings_history h WHERE h.finding_id = f.id);

-- Notifications (RECONCILER_NOTIFY_URL): a finding is posted once. A row is
-- written in the transaction that follows a successful post; a failed post
-- leaves the finding to the next run.
CREATE TABLE IF NOT EXISTS reconciliation_notified (
    finding_id   bigint      PRIMARY KEY,
    notified_at  timestamptz NOT NULL DEFAULT now()
);

-- `differs`, as src/reconcile/differs.rs computes it (tests/it/review_view.rs
-- keeps the two equal): minor units in major units with the currency's
-- exponent (Stripe "Supported currencies"), then the per-kind comparison.
CREATE OR REPLACE FUNCTION reconciliation_money(minor jsonb, currency text)
RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN minor IS NULL OR jsonb_typeof(minor) <> 'number' OR (minor #>> '{}') !~ '^-?[0-9]+$' THEN NULL
        WHEN nullif(btrim(currency), '') IS NULL THEN minor #>> '{}'
        ELSE (SELECT CASE WHEN e = 0 THEN minor #>> '{}'
                          ELSE round((minor #>> '{}')::numeric / 10::numeric ^ e, e)::text END
                FROM (SELECT CASE
                        WHEN lower(btrim(currency)) IN ('bif', 'clp', 'djf', 'gnf', 'jpy', 'kmf', 'krw', 'mga',
                             'pyg', 'rwf', 'ugx', 'vnd', 'vuv', 'xaf', 'xof', 'xpf') THEN 0
                        WHEN lower(btrim(currency)) IN ('bhd', 'jod', 'kwd', 'omr', 'tnd') THEN 3
                        ELSE 2 END AS e) x)
             || ' ' || upper(btrim(currency))
    END
$$;

CREATE OR REPLACE FUNCTION reconciliation_differs(
    kind text, local_status text, external_status text, details jsonb)
RETURNS jsonb LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN kind = 'amount_mismatch' THEN jsonb_build_object(
            'field', 'amount',
            'local', coalesce(
                reconciliation_money(details->'local_amount', details->>'currency'),
                CASE WHEN jsonb_typeof(details->'local_amount_major') = 'string' THEN
                    (details->>'local_amount_major')
                    || coalesce(' ' || upper(nullif(btrim(details->>'currency'), '')), '') END),
            'stripe', reconciliation_money(details->'stripe_amount', details->>'currency'))
        WHEN kind = 'currency_mismatch' THEN jsonb_build_object(
            'field', 'currency',
            'local', upper(btrim(details->>'local_currency')),
            'stripe', upper(btrim(details->>'stripe_currency')))
        WHEN kind IN ('refunded', 'refunded_locally_not_externally') THEN jsonb_build_object(
            'field', 'amount_refunded',
            'local', CASE WHEN kind = 'refunded' THEN NULL ELSE local_status END,
            'stripe', CASE
                WHEN reconciliation_money(details->'amount_refunded', NULL) IS NULL THEN NULL
                WHEN reconciliation_money(details->'amount', NULL) IS NULL
                    THEN reconciliation_money(details->'amount_refunded', details->>'currency')
                WHEN nullif(btrim(details->>'currency'), '') IS NULL
                    THEN (details->>'amount_refunded') || ' of ' || (details->>'amount')
                ELSE split_part(reconciliation_money(details->'amount_refunded', details->>'currency'), ' ', 1)
                     || ' of ' || reconciliation_money(details->'amount', details->>'currency') END)
        WHEN kind = 'disputed' THEN jsonb_build_object(
            'field', 'disputed', 'local', NULL,
            'stripe', reconciliation_money(details->'amount', details->>'currency'))
        WHEN kind = 'duplicate_payment_intent' THEN jsonb_build_object(
            'field', 'payment_intent', 'local', 'on several payments', 'stripe', NULL)
        WHEN kind = 'missing_locally' THEN jsonb_build_object(
            'field', 'payment', 'local', NULL,
            'stripe', coalesce(reconciliation_money(details->'amount_received', details->>'currency'),
                               reconciliation_money(details->'amount', details->>'currency')))
        WHEN kind = 'missing_externally' THEN jsonb_build_object(
            'field', 'payment_intent', 'local', local_status, 'stripe', NULL)
        WHEN kind = 'invalid_payment_intent_id' THEN jsonb_build_object(
            'field', 'payment_intent_id', 'local', local_status, 'stripe', NULL)
        WHEN kind = 'persistently_unverifiable' THEN jsonb_build_object(
            'field', 'stripe_answer', 'local', local_status,
            'stripe', CASE WHEN jsonb_typeof(details->'last_error') = 'string' THEN details->>'last_error' END)
        WHEN kind = 'write_refused' THEN jsonb_build_object(
            'field', 'write',
            'local', CASE WHEN jsonb_typeof(details->'message') = 'string' THEN
                coalesce(CASE WHEN jsonb_typeof(details->'sqlstate') = 'string'
                              THEN details->>'sqlstate' || ' ' END, '') || (details->>'message') END,
            'stripe', CASE WHEN jsonb_typeof(details->'observed_external_status') = 'string'
                           THEN details->>'observed_external_status' END)
        ELSE jsonb_build_object('field', 'status', 'local', local_status, 'stripe', external_status)
    END
$$;

-- The payment's order and PaymentIntent for the view, read from `payments`
-- through PL/pgSQL, whose body PostgreSQL does not record as a dependency:
-- the view must never stop the application from changing or dropping its
-- own columns (DESIGN.md, turn 4: the application's table is the
-- application's). The row is read as JSON, so a column the application
-- dropped or retyped gives NULL or its text instead of an error. Runs with
-- its owner's rights (SECURITY DEFINER, search_path pinned to the schema
-- migrate ran in), so the BI role reads the queue without reading
-- `payments`; EXECUTE is granted only where sql/least_privilege.sql says.
CREATE OR REPLACE FUNCTION reconciliation_payment_ref(
    _payment_id bigint, OUT order_id text, OUT payment_intent_id text)
LANGUAGE plpgsql STABLE SECURITY DEFINER AS $$
DECLARE
    _row jsonb;
BEGIN
    SELECT to_jsonb(p) INTO _row FROM payments p WHERE p.id = _payment_id;
    order_id := _row ->> 'order_id';
    payment_intent_id := _row ->> 'stripe_payment_intent_id';
END
$$;
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION reconciliation_payment_ref(bigint) SET search_path = %I, pg_catalog',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION reconciliation_payment_ref(bigint) FROM PUBLIC;

-- The stable interface for BI tools (docs/review.md): one row per finding.
-- Columns are added, never renamed or removed. It reads `payments` only
-- through reconciliation_payment_ref (no dependency on the application's
-- table), so a role granted SELECT on it and EXECUTE on that function
-- (sql/least_privilege.sql, stripe_reconciler_bi) reads the queue without
-- reading `payments`.
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
       coalesce(p.payment_intent_id, f.stripe_payment_intent_id)::text AS payment_intent_id,
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
       CASE WHEN coalesce(p.payment_intent_id, f.stripe_payment_intent_id) ~ '^pi_[A-Za-z0-9]+$'
             AND (f.stripe_account_id IS NULL OR f.stripe_account_id = ''
                  OR f.stripe_account_id ~ '^acct_[A-Za-z0-9]+$')
            THEN 'https://dashboard.stripe.com/'
                 || coalesce(nullif(f.stripe_account_id, '') || '/', '')
                 || 'payments/' || coalesce(p.payment_intent_id, f.stripe_payment_intent_id)
       END                                                      AS dashboard_url
  FROM reconciliation_findings f
  LEFT JOIN LATERAL reconciliation_payment_ref(f.payment_id) p ON f.payment_id IS NOT NULL;
