-- The grants `stripe-reconciler run`, `events`, `repair`, `status` and `findings` need,
-- and nothing more. Run as the owner of the tables, after `migrate`:
--
--   psql "$OWNER_DATABASE_URL" -f sql/least_privilege.sql
--   ALTER ROLE stripe_reconciler_job PASSWORD '...';   -- then use it in DATABASE_URL
--
-- `migrate` itself needs DDL rights: run it (or the chart's hook Job) as the
-- owner. Rename the role by editing the name below.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'stripe_reconciler_job') THEN
        CREATE ROLE stripe_reconciler_job LOGIN;
    END IF;
END
$$;

GRANT USAGE ON SCHEMA public TO stripe_reconciler_job;

-- Reads the batch; the canonical writer (repair) changes status, version and
-- updated_at. The scan writes nothing else into payments: what it observed
-- goes to reconciliation_payment_state.
GRANT SELECT ON payments TO stripe_reconciler_job;
GRANT UPDATE (status, version, updated_at) ON payments TO stripe_reconciler_job;

-- The reconciler's own tables. DELETE only on reconciliation_unverifiable (a
-- row is forgotten there as soon as Stripe answers for its payment),
-- reconciliation_payment_state (the state of a deleted payment is forgotten),
-- reconciliation_events_retry (a PaymentIntent leaves once a read settles
-- it, or its event is older than grace + 1 h) and reconciliation_events_seen
-- (an event is forgotten once no overlap re-reads it).
GRANT SELECT, INSERT, UPDATE ON reconciliation_cursor TO stripe_reconciler_job;
GRANT SELECT, INSERT, UPDATE ON reconciliation_findings TO stripe_reconciler_job;
GRANT SELECT, INSERT, UPDATE ON reconciliation_runs TO stripe_reconciler_job;
GRANT SELECT, INSERT, UPDATE ON reconciliation_events_position TO stripe_reconciler_job;
GRANT SELECT, INSERT, UPDATE, DELETE ON reconciliation_unverifiable TO stripe_reconciler_job;
GRANT SELECT, INSERT, UPDATE, DELETE ON reconciliation_events_retry TO stripe_reconciler_job;
GRANT SELECT, INSERT, UPDATE, DELETE ON reconciliation_events_seen TO stripe_reconciler_job;
-- Which tables the reconciler created (read by the outbox check of run/repair),
-- and the commands handed to a debezium outbox's relay (one per finding).
GRANT SELECT ON reconciliation_owned_tables TO stripe_reconciler_job;
GRANT SELECT, INSERT ON reconciliation_relayed_commands TO stripe_reconciler_job;
GRANT SELECT, INSERT, UPDATE, DELETE ON reconciliation_payment_state TO stripe_reconciler_job;
-- Every finding's history (append-only: written by the trigger on
-- reconciliation_findings, never updated or deleted) and the findings a
-- notification was sent for (RECONCILER_NOTIFY_URL).
GRANT SELECT, INSERT ON reconciliation_findings_history TO stripe_reconciler_job;
GRANT SELECT, INSERT ON reconciliation_notified TO stripe_reconciler_job;

-- Repair commands and PaymentStatusChanged events (the outbox may be shared).
GRANT SELECT, INSERT, UPDATE ON outbox TO stripe_reconciler_job;

-- nextval on the id sequences: needed where an application's own outbox has a
-- serial (not identity) id; harmless for identity columns.
DO $$
DECLARE
    t text;
    seq text;
BEGIN
    FOREACH t IN ARRAY ARRAY['outbox', 'reconciliation_findings', 'reconciliation_runs'] LOOP
        seq := pg_get_serial_sequence(t, 'id');
        IF seq IS NOT NULL THEN
            EXECUTE format('GRANT USAGE ON SEQUENCE %s TO stripe_reconciler_job', seq);
        END IF;
    END LOOP;
END
$$;

-- A read-only role for BI tools (Metabase, Grafana, Power BI): the view
-- reconciliation_review and nothing else (docs/review.md). The view runs
-- with its owner's rights and reads `payments` through a SECURITY DEFINER
-- function, so the role needs no grant on `payments` or on the reconciler's
-- tables. Give it a password and use it in the BI tool:
--   ALTER ROLE stripe_reconciler_bi PASSWORD '...';
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'stripe_reconciler_bi') THEN
        CREATE ROLE stripe_reconciler_bi LOGIN;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL; -- created by a concurrent session
END
$$;
GRANT USAGE ON SCHEMA public TO stripe_reconciler_bi;
GRANT SELECT ON reconciliation_review TO stripe_reconciler_bi;
-- The view reads each finding's order and PaymentIntent through this
-- function (it runs with its owner's rights; the role reads no payment row
-- otherwise).
GRANT EXECUTE ON FUNCTION reconciliation_payment_ref(bigint) TO stripe_reconciler_bi;
-- Its overload for uuid, text and numeric keys (migration 0018, docs/keys.md).
GRANT EXECUTE ON FUNCTION reconciliation_payment_ref(anyelement) TO stripe_reconciler_bi;
