-- Which tables the reconciler created itself: only those may be altered or
-- indexed by `migrate` (DESIGN.md, Turn 3 principles). The outbox is created
-- by code, not by a migration, since its name and shape are settings.
CREATE TABLE IF NOT EXISTS reconciliation_owned_tables (
    table_name text        PRIMARY KEY,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- An install whose `outbox` an older version created (migration 0001 with its
-- outbox section, fingerprinted by the `outbox_unprocessed` index) keeps
-- treating it as its own. The `migrate` of this version runs 0001 without that
-- section, so a table the application brought never carries the index.
INSERT INTO reconciliation_owned_tables (table_name)
SELECT 'public.outbox'
 WHERE EXISTS (SELECT 1 FROM pg_indexes
                WHERE schemaname = 'public' AND tablename = 'outbox'
                  AND indexname = 'outbox_unprocessed')
ON CONFLICT (table_name) DO NOTHING;

-- Commands handed to an application's relay (RECONCILER_OUTBOX_SHAPE=debezium):
-- the relay may delete its rows once delivered, so "one command per finding"
-- is remembered here, in the reconciler's own table.
CREATE TABLE IF NOT EXISTS reconciliation_relayed_commands (
    finding_id  bigint      PRIMARY KEY REFERENCES reconciliation_findings (id) ON DELETE CASCADE,
    command_id  uuid        NOT NULL,
    event_type  text        NOT NULL,
    enqueued_at timestamptz NOT NULL DEFAULT now()
);
