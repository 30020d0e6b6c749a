-- A lease on the cursor: a second run learns it is second before it spends
-- any Stripe reads. A row with an expiry, not a session-level advisory lock,
-- so a connection pooler (PgBouncer in transaction mode) cannot orphan it,
-- and a crashed run's lease simply expires. The compare-and-set on last_id
-- stays the guarantee.
ALTER TABLE reconciliation_cursor ADD COLUMN IF NOT EXISTS lease_owner text;
ALTER TABLE reconciliation_cursor ADD COLUMN IF NOT EXISTS lease_expires_at timestamptz;
