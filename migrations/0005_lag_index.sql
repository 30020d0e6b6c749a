-- no-transaction
-- Reconciliation lag = now() - min(coalesce(last_reconciled_at, created_at)).
-- This expression index turns that min() into one index lookup on a 10M-row
-- table. Built CONCURRENTLY so the application keeps writing to payments
-- while it builds (sqlx runs this file outside a transaction).
CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_reconciled_or_created
    ON payments ((coalesce(last_reconciled_at, created_at)));
