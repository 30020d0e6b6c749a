-- no-transaction
-- Rows whose ids were allocated before but committed after the cursor passed
-- them (sequence order is not commit order), and rows still in the grace
-- window when it passed, were never confirmed with Stripe. Each batch picks a
-- few of them up behind the cursor with one lookup on this partial index
-- (rows leave it as soon as they are stamped), instead of leaving them a whole
-- cycle. Built CONCURRENTLY: the application keeps writing meanwhile.
CREATE INDEX CONCURRENTLY IF NOT EXISTS payments_never_reconciled
    ON payments (id) WHERE last_reconciled_at IS NULL;
