-- Schema of the design note (shared/seed), made safe to apply to a database that
-- already has `payments` and/or an `outbox`: every object is IF NOT EXISTS and the
-- reconciler's own columns are added with ADD COLUMN IF NOT EXISTS.
--
-- ALTER TABLE takes a brief exclusive lock on the application's tables: give
-- up after 10 s rather than queue the application's writes behind a long
-- transaction (rerun `migrate` later). The lag index is built CONCURRENTLY in
-- its own migration (0005), outside this transaction.
SET LOCAL lock_timeout = '10s';

CREATE TABLE IF NOT EXISTS payments (
    id                       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id                 text        NOT NULL,
    stripe_payment_intent_id text        NOT NULL UNIQUE,
    status                   text        NOT NULL CHECK (status IN ('pending', 'paid', 'failed')),
    version                  bigint      NOT NULL DEFAULT 0,
    created_at               timestamptz NOT NULL DEFAULT now(),
    updated_at               timestamptz NOT NULL DEFAULT now(),
    observed_external_status text,
    last_reconciled_at       timestamptz
);

-- An existing payments table may predate the reconciler.
ALTER TABLE payments ADD COLUMN IF NOT EXISTS observed_external_status text;
ALTER TABLE payments ADD COLUMN IF NOT EXISTS last_reconciled_at timestamptz;

CREATE TABLE IF NOT EXISTS reconciliation_cursor (
    job                     text        PRIMARY KEY,
    last_id                 bigint      NOT NULL DEFAULT 0,
    cycle_started_at        timestamptz NOT NULL DEFAULT now(),
    last_cycle_completed_at timestamptz
);

CREATE TABLE IF NOT EXISTS reconciliation_findings (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    payment_id       bigint      NOT NULL REFERENCES payments (id),
    kind             text        NOT NULL,
    local_status     text        NOT NULL,
    external_status  text,
    detected_at      timestamptz NOT NULL DEFAULT now(),
    resolved_at      timestamptz
);

-- Why a finding was resolved: 'repaired', 'cleared' (a later scan found the
-- payment in sync), 'manual', ...
ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS resolution text;

-- The same drift is recorded once while it is open (design note).
CREATE UNIQUE INDEX IF NOT EXISTS reconciliation_findings_open
    ON reconciliation_findings (payment_id, kind) WHERE resolved_at IS NULL;

-- The outbox the seed writes to but does not define. Users often have one.
CREATE TABLE IF NOT EXISTS outbox (
    id             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    processed_at   timestamptz,
    attempts       int         NOT NULL DEFAULT 0,
    last_error     text
);

-- An existing outbox may lack the worker's bookkeeping columns.
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS processed_at timestamptz;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS attempts int NOT NULL DEFAULT 0;
ALTER TABLE outbox ADD COLUMN IF NOT EXISTS last_error text;

CREATE INDEX IF NOT EXISTS outbox_unprocessed
    ON outbox (event_type, id) WHERE processed_at IS NULL;

-- One row per invocation of `run`: B and R for the capacity figures, and a
-- history operators can read.
CREATE TABLE IF NOT EXISTS reconciliation_runs (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job           text        NOT NULL,
    started_at    timestamptz NOT NULL DEFAULT now(),
    finished_at   timestamptz,
    batch_size    int         NOT NULL,
    batches       int         NOT NULL DEFAULT 0,
    rows_scanned  bigint      NOT NULL DEFAULT 0,
    verdicts      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    findings_created bigint   NOT NULL DEFAULT 0,
    commands_enqueued bigint  NOT NULL DEFAULT 0,
    wrapped       boolean     NOT NULL DEFAULT false,
    outcome       text
);

CREATE INDEX IF NOT EXISTS reconciliation_runs_job_started
    ON reconciliation_runs (job, started_at DESC);
