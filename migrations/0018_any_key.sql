-- Any primary key (issue 31, docs/keys.md): `payments.id` may be an integer,
-- numeric, uuid or text. Our own tables only: `payments` is never altered.
--
-- 1. The cursor holds a position, not an integer: the key of the last row
--    walked as text (NULL: the cycle's start, before every row, so ids <= 0
--    are read like any other) and, for a walk in `(created_at, id)` order,
--    that row's `created_at`. `last_id` is kept for older readers and still
--    written for integer keys; a cursor at a real position moves over.
-- 2. The view's look-up of a payment takes the key in whatever type our key
--    columns hold (`migrate` aligns them with `payments.id`:
--    store::keys::align): a polymorphic overload beside 0013's bigint one.
SET LOCAL lock_timeout = '10s';

ALTER TABLE reconciliation_cursor ADD COLUMN IF NOT EXISTS last_key text;
ALTER TABLE reconciliation_cursor ADD COLUMN IF NOT EXISTS last_created_at timestamptz;
UPDATE reconciliation_cursor SET last_key = last_id::text
 WHERE last_key IS NULL AND last_id <> 0;

CREATE OR REPLACE FUNCTION reconciliation_payment_ref(
    _payment_id anyelement, OUT order_id text, OUT payment_intent_id text)
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
    EXECUTE format('ALTER FUNCTION reconciliation_payment_ref(anyelement) SET search_path = %I, pg_catalog',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION reconciliation_payment_ref(anyelement) FROM PUBLIC;

-- A `(created_at, id)` walk reads the state table by `created_at`: the last
-- seen row (rows never seen behind it) and the ranges a batch walked
-- (payments deleted there are forgotten).
CREATE INDEX IF NOT EXISTS reconciliation_payment_state_created
    ON reconciliation_payment_state (created_at, payment_id);
