-- Who resolved a finding by hand, and why (`stripe-reconciler findings resolve`).
ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS resolved_by text;
ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS resolution_note text;

-- The review queue lists open findings by kind.
CREATE INDEX IF NOT EXISTS reconciliation_findings_open_kind
    ON reconciliation_findings (kind, id) WHERE resolved_at IS NULL;
