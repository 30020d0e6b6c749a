-- The read of rows behind the cursor before and after issue 40, on a
-- partition repro (BENCHMARKS.md, "Issue 40"): main's single query
-- (old_behind), walk40's sweep step and read with the late-commit window as
-- a range probed row by row (new_behind), and perf40's window as an
-- anti-join of two bounded index ranges (late_window) whose ids join the
-- sweep's keys in one array of primary-key probes (perf40_behind). Run on a database of its own
-- where `stripe-reconciler migrate` has run on the table below (created
-- first, empty), with the cursor's row as `-v pos=20000`:
--
--   psql "$URL" -v pos=20000 -f scripts/bench-behind-cursor.sql
--
-- 40,000 rows in two partitions on alternating ids, loaded after migrate;
-- the eu job's state as its batches leave it at row :pos.
\set ON_ERROR_STOP on
INSERT INTO payments (order_id, stripe_payment_intent_id, status, created_at, updated_at, legal_entity)
SELECT 'ord_'||g, 'pi_'||g, 'paid', now() - interval '2 hours' - (40000-g) * interval '1 second',
       now() - interval '1 hour', CASE WHEN g % 2 = 0 THEN 'eu' ELSE 'us' END
  FROM generate_series(1, 40000) g
 WHERE NOT EXISTS (SELECT 1 FROM payments);
TRUNCATE reconciliation_payment_state;
INSERT INTO reconciliation_payment_state (payment_id, created_at, last_reconciled_at, observed_external_status)
SELECT id, created_at, CASE WHEN legal_entity = 'eu' AND id <= :pos THEN now() END,
       CASE WHEN legal_entity = 'eu' AND id <= :pos THEN 'succeeded' END
  FROM payments WHERE id <= :pos + 1900;
ANALYZE;
SELECT (:pos + 1900 - 19000)::text AS win, (:pos)::text AS cur \gset
PREPARE old_behind(text, float8, bigint, text, text[], text, timestamptz, text, text) AS
SELECT convert_to(p.id::text,'SQL_ASCII') AS id, p.stripe_payment_intent_id, p.status, p.version, p.updated_at, p.created_at,
       p.updated_at > now() - make_interval(secs => $2) AS recently_changed,
       coalesce((p.stripe_payment_intent_id)::text, '') <> '' AND EXISTS (SELECT 1 FROM payments q WHERE q.stripe_payment_intent_id = p.stripe_payment_intent_id AND q.id <> p.id) AS shares
  FROM payments p
 WHERE p.id <= ($1)::bigint AND p.id >= least(($8)::bigint, ($6)::bigint)
   AND p.id IN (SELECT s.payment_id FROM reconciliation_payment_state s
                 WHERE s.last_reconciled_at IS NULL AND s.payment_id BETWEEN ($8)::bigint AND ($1)::bigint
                   AND NOT (s.payment_id = ANY(($5)::bigint[]))
                UNION ALL
                SELECT q.id FROM payments q
                 WHERE q.id <= ($1)::bigint AND q.id > ($6)::bigint
                   AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s WHERE s.payment_id = q.id OFFSET 0))
   AND p.updated_at <= now() - make_interval(secs => $2)
   AND NOT EXISTS (SELECT 1 FROM reconciliation_unverifiable u JOIN reconciliation_cursor c ON c.job = u.job
                    WHERE u.job = $4 AND u.payment_id = p.id AND u.last_cycle = c.cycle_started_at)
   AND NOT (p.id = ANY(($5)::bigint[])) AND p.legal_entity = $9
 ORDER BY p.id LIMIT $3;
EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE old_behind(:'cur', 60, 190, 'payments-eu', '{}', :'win', NULL, '1', 'eu');
PREPARE sweep(text, timestamptz, text, timestamptz, bigint) AS
SELECT convert_to(s.payment_id::text, 'SQL_ASCII') AS key, s.created_at FROM reconciliation_payment_state s
 WHERE s.last_reconciled_at IS NULL AND s.payment_id BETWEEN ($3)::bigint AND ($1)::bigint
 ORDER BY s.payment_id LIMIT $5;
PREPARE new_behind(text, float8, bigint, text, text[], text, timestamptz, text[], text) AS
(SELECT convert_to(p.id::text,'SQL_ASCII') AS id, p.stripe_payment_intent_id, p.status, p.version, p.updated_at, p.created_at,
       p.updated_at > now() - make_interval(secs => $2) AS recently_changed,
       coalesce((p.stripe_payment_intent_id)::text, '') <> '' AND EXISTS (SELECT 1 FROM payments q WHERE q.stripe_payment_intent_id = p.stripe_payment_intent_id AND q.id <> p.id) AS shares,
       p.id AS sort_key
  FROM unnest(($8)::bigint[]) AS c(id)
 CROSS JOIN LATERAL (SELECT * FROM payments p WHERE p.id = c.id OFFSET 0) p WHERE p.id <= ($1)::bigint
   AND p.updated_at <= now() - make_interval(secs => $2)
   AND NOT EXISTS (SELECT 1 FROM reconciliation_unverifiable u JOIN reconciliation_cursor c ON c.job = u.job
                    WHERE u.job = $4 AND u.payment_id = p.id AND u.last_cycle = c.cycle_started_at)
   AND NOT (p.id = ANY(($5)::bigint[])) AND p.legal_entity = $9)
UNION ALL
(SELECT convert_to(p.id::text,'SQL_ASCII') AS id, p.stripe_payment_intent_id, p.status, p.version, p.updated_at, p.created_at,
       p.updated_at > now() - make_interval(secs => $2) AS recently_changed,
       coalesce((p.stripe_payment_intent_id)::text, '') <> '' AND EXISTS (SELECT 1 FROM payments q WHERE q.stripe_payment_intent_id = p.stripe_payment_intent_id AND q.id <> p.id) AS shares,
       p.id AS sort_key
  FROM payments p WHERE p.id > ($6)::bigint AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s WHERE s.payment_id = p.id OFFSET 0)
   AND p.id <= ($1)::bigint AND p.updated_at <= now() - make_interval(secs => $2)
   AND NOT EXISTS (SELECT 1 FROM reconciliation_unverifiable u JOIN reconciliation_cursor c ON c.job = u.job
                    WHERE u.job = $4 AND u.payment_id = p.id AND u.last_cycle = c.cycle_started_at)
   AND NOT (p.id = ANY(($5)::bigint[])) AND p.legal_entity = $9
 ORDER BY p.id LIMIT $3)
ORDER BY sort_key LIMIT $3;
EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE sweep(:'cur', NULL, '1', NULL, 1900);
SELECT array_agg(payment_id::text) AS c FROM (SELECT s.payment_id FROM reconciliation_payment_state s WHERE s.last_reconciled_at IS NULL AND s.payment_id BETWEEN 1 AND :pos ORDER BY 1 LIMIT 1900) x \gset
EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE new_behind(:'cur', 60, 190, 'payments-eu', '{}', :'win', NULL, :'c', 'eu');
PREPARE late_window(text, text) AS
SELECT p.id::text FROM payments p
 WHERE p.id > ($1)::bigint AND p.id <= ($2)::bigint
   AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s
                    WHERE s.payment_id = p.id
                      AND s.payment_id > ($1)::bigint AND s.payment_id <= ($2)::bigint)
 ORDER BY p.id;
EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE late_window(:'win', :'cur');
PREPARE perf40_behind(text, float8, bigint, text, text[], text[], text) AS
SELECT convert_to(p.id::text,'SQL_ASCII') AS id, p.stripe_payment_intent_id, p.status, p.version, p.updated_at, p.created_at,
       p.updated_at > now() - make_interval(secs => $2) AS recently_changed,
       coalesce((p.stripe_payment_intent_id)::text, '') <> '' AND EXISTS (SELECT 1 FROM payments q WHERE q.stripe_payment_intent_id = p.stripe_payment_intent_id AND q.id <> p.id) AS shares,
       p.id AS sort_key
  FROM unnest(($6)::bigint[]) AS c(id)
 CROSS JOIN LATERAL (SELECT * FROM payments p WHERE p.id = c.id OFFSET 0) p WHERE p.id <= ($1)::bigint
   AND p.updated_at <= now() - make_interval(secs => $2)
   AND NOT EXISTS (SELECT 1 FROM reconciliation_unverifiable u JOIN reconciliation_cursor c ON c.job = u.job
                    WHERE u.job = $4 AND u.payment_id = p.id AND u.last_cycle = c.cycle_started_at)
   AND NOT (p.id = ANY(($5)::bigint[])) AND p.legal_entity = $7
 ORDER BY sort_key LIMIT $3;
SELECT coalesce(array_agg(k), '{}') AS c2 FROM (SELECT unnest(:'c'::text[]) AS k
  UNION ALL SELECT p.id::text FROM payments p WHERE p.id > (:'win')::bigint AND p.id <= (:'cur')::bigint
   AND NOT EXISTS (SELECT 1 FROM reconciliation_payment_state s WHERE s.payment_id = p.id)) x \gset
EXPLAIN (ANALYZE, BUFFERS, TIMING OFF) EXECUTE perf40_behind(:'cur', 60, 190, 'payments-eu', '{}', :'c2', 'eu');
