-- Connect (issue 24): the Stripe account a finding is about. NULL is the
-- platform's own account (or a row whose account column held no usable
-- `acct_` id); otherwise the connected account the reads went to with
-- `Stripe-Account`. `findings list` shows it and links the Dashboard page of
-- the connected account's payment. Our own table only: `payments` and the
-- application's outbox are never altered.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_findings ADD COLUMN IF NOT EXISTS stripe_account_id text;
