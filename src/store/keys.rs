//! `payments.id` of any type (docs/keys.md): the detection at
//! start, the key's wire form (text) in SQL, and the type of the
//! reconciler's own key columns, which `migrate` keeps equal to the
//! application's ([`align`]). Only the reconciler's tables are altered;
//! `payments` is read from the catalog, never changed.

use crate::config::PaymentTimes;
use sqlx::encode::IsNull;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgArgumentBuffer, PgHasArrayType, PgTypeInfo, PgValueRef};
use sqlx::{PgConnection, Postgres};

use super::{Context, StoreError};
use crate::key::{KeyType, PaymentKey, UnsupportedKey};

impl sqlx::Type<Postgres> for PaymentKey {
    fn type_info() -> PgTypeInfo {
        <String as sqlx::Type<Postgres>>::type_info()
    }
    /// Text, or its bytes (`convert_to(id::text, 'SQL_ASCII')`: a key
    /// that is not UTF-8 in a `SQL_ASCII` database, [`super::text`]).
    fn compatible(ty: &PgTypeInfo) -> bool {
        <String as sqlx::Type<Postgres>>::compatible(ty)
            || <Vec<u8> as sqlx::Type<Postgres>>::compatible(ty)
    }
}

impl PgHasArrayType for PaymentKey {
    fn array_type_info() -> PgTypeInfo {
        <String as PgHasArrayType>::array_type_info()
    }
}

impl sqlx::Encode<'_, Postgres> for PaymentKey {
    fn encode_by_ref(&self, buf: &mut PgArgumentBuffer) -> Result<IsNull, BoxDynError> {
        <&str as sqlx::Encode<Postgres>>::encode(self.as_str(), buf)
    }
}

/// A key read as text: bytes that are not UTF-8 (a `SQL_ASCII` database)
/// become `\xNN` ([`super::text::decode`]) instead of failing the statement.
impl<'r> sqlx::Decode<'r, Postgres> for PaymentKey {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        // A text value's bytes, in either wire format.
        let bytes = value.as_bytes()?;
        Ok(PaymentKey::new(super::text::decode(bytes)))
    }
}

/// The reconciler's tables whose `payment_id` holds a payment's key.
pub const KEY_TABLES: [&str; 3] = [
    "reconciliation_findings",
    "reconciliation_payment_state",
    "reconciliation_unverifiable",
];

/// Reads `payments.id`'s type and whether `payments` has a valid,
/// non-partial index whose first column is a NOT NULL `created_at` (then
/// uuid and text keys walk by it, [`crate::key::Walk::CreatedAt`]). An
/// absent table gives the default (`bigint`: the migrations create the
/// demo's).
///
/// # Errors
/// `Ok(Err(UnsupportedKey))` for a type the reconciler cannot key by;
/// [`StoreError`] from the database.
pub async fn detect(
    conn: &mut PgConnection,
) -> Result<Result<KeyType, UnsupportedKey>, StoreError> {
    let found: Option<(String, String, Option<String>, bool)> = super::query_as(
        "SELECT format_type(a.atttypid, NULL),
                format_type(coalesce(nullif(t.typbasetype, 0), t.oid), NULL),
                (SELECT format_type(to_regtype(quote_ident(e.extnamespace::regnamespace::text) || '.citext'), NULL)
                   FROM pg_extension e WHERE e.extname = 'citext'),
                EXISTS (SELECT 1 FROM pg_index i
                          JOIN pg_attribute c ON c.attrelid = i.indrelid AND c.attnum = i.indkey[0]
                         WHERE i.indrelid = a.attrelid AND i.indisvalid AND i.indpred IS NULL
                           AND c.attname = 'created_at' AND c.attnotnull)
           FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
          WHERE a.attrelid = to_regclass('payments') AND a.attname = 'id'
            AND a.attnum > 0 AND NOT a.attisdropped",
    )
    .fetch_optional(conn)
    .await
    .context("reading the type of payments.id")?;
    Ok(match found {
        None => Ok(KeyType::default()),
        Some((sql, base, citext, created_index)) => {
            KeyType::from_catalog_with_base(&sql, &base, citext.as_deref(), created_index)
        }
    })
}

/// [`detect`] for a writer that has no settings (the canonical writer called
/// by a webhook handler): an unsupported type gives the default, and the
/// statements then fail with the database's own error (`run` and `migrate`
/// refuse such a table at start).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn current(conn: &mut PgConnection) -> Result<KeyType, StoreError> {
    Ok(detect(conn).await?.unwrap_or_default())
}

/// The key columns of the reconciler's tables whose type is not
/// [`KeyType::stored`] (e.g. still `bigint` on a uuid-keyed table), or, for
/// a text key, whose collation is not `payments.id`'s (a column declared
/// `COLLATE "und-x-icu"` in a `C` database orders keys differently, and
/// every range on our tables must order as the walk does): what [`align`]
/// changes. Empty when they match or the tables do not exist yet.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn misaligned(conn: &mut PgConnection, key: &KeyType) -> Result<Vec<String>, StoreError> {
    super::query_scalar(
        "SELECT c.relname::text FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
          WHERE a.attrelid = ANY (ARRAY[to_regclass('reconciliation_findings'),
                                        to_regclass('reconciliation_payment_state'),
                                        to_regclass('reconciliation_unverifiable')])
            AND a.attname = 'payment_id' AND NOT a.attisdropped
            AND (format_type(a.atttypid, NULL) <> $1
                 OR (format_type(a.atttypid, NULL) = 'text'
                     AND a.attcollation IS DISTINCT FROM (
                         SELECT i.attcollation FROM pg_attribute i
                          WHERE i.attrelid = to_regclass('payments') AND i.attname = 'id'
                            AND NOT i.attisdropped)))
          ORDER BY 1",
    )
    .bind(key.stored_catalog())
    .fetch_all(conn)
    .await
    .context("reading the type of the reconciler's key columns")
}

/// Before the first migration, on a table keyed by something other than an
/// integer: creates `reconciliation_findings` as migration 0001 does but
/// without 0001's foreign key to `payments (id)`, which cannot be built on
/// a uuid or text key (later releases drop it anyway: `store::legacy`).
/// Migration 0001's `CREATE TABLE IF NOT EXISTS` then keeps this one. Does
/// nothing when the table exists or the key is an integer.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn prepare(conn: &mut PgConnection) -> Result<(), StoreError> {
    let Ok(key) = detect(&mut *conn).await? else {
        return Ok(());
    };
    if key.kind() == crate::key::KeyKind::Integer {
        return Ok(());
    }
    super::query(
        "CREATE TABLE IF NOT EXISTS reconciliation_findings (
             id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
             payment_id       bigint      NOT NULL,
             kind             text        NOT NULL,
             local_status     text        NOT NULL,
             external_status  text,
             detected_at      timestamptz NOT NULL DEFAULT now(),
             resolved_at      timestamptz
         )",
    )
    .execute(conn)
    .await
    .context("creating reconciliation_findings for a non-integer key")?;
    Ok(())
}

/// Makes the reconciler's key columns ([`KEY_TABLES`]) hold
/// [`KeyType::stored`], in one transaction on the reconciler's own tables
/// only (a 10 s lock timeout): the view `reconciliation_review` is dropped,
/// the columns changed (`USING payment_id::text::<type>`), and the view
/// created again from its own definition with its grants. Returns the
/// tables changed (empty: nothing to do).
///
/// # Errors
/// [`StoreError`]: a stored key that is not a value of the new type (the
/// application changed `payments.id`'s type under existing findings).
pub async fn align(conn: &mut PgConnection, key: &KeyType) -> Result<Vec<String>, StoreError> {
    let mut tx = super::begin(&mut *conn)
        .await
        .context("opening a transaction")?;
    let tables = misaligned(&mut tx, key).await?;
    if tables.is_empty() {
        tx.commit().await.context("closing a transaction")?;
        return Ok(tables);
    }
    let alters = alter_key_columns(&mut tx, key, &tables).await?;
    let sql = format!(
        "DO $align$
         DECLARE
             def text;
             acl aclitem[];
             g record;
         BEGIN
             SET LOCAL lock_timeout = '10s';
             SELECT pg_get_viewdef(c.oid), c.relacl INTO def, acl
               FROM pg_class c WHERE c.oid = to_regclass('reconciliation_review');
             IF def IS NOT NULL THEN
                 DROP VIEW reconciliation_review;
             END IF;
             {alters}
             IF def IS NOT NULL THEN
                 EXECUTE 'CREATE VIEW reconciliation_review AS ' || def;
                 FOR g IN SELECT x.privilege_type, x.grantee
                            FROM aclexplode(acl) x
                           WHERE x.grantee <> (SELECT relowner FROM pg_class
                                                WHERE oid = 'reconciliation_review'::regclass) LOOP
                     IF g.grantee = 0 THEN
                         EXECUTE format('GRANT %s ON reconciliation_review TO PUBLIC', g.privilege_type);
                     ELSE
                         EXECUTE format('GRANT %s ON reconciliation_review TO %I', g.privilege_type,
                                        (SELECT rolname FROM pg_roles WHERE oid = g.grantee));
                     END IF;
                 END LOOP;
             END IF;
         END
         $align$"
    );
    super::lock_migrations(&mut tx).await?;
    super::query(&sql)
        .execute(&mut *tx)
        .await
        .context("changing the type of the reconciler's key columns")?;
    tx.commit()
        .await
        .context("committing the key columns' type")?;
    Ok(tables)
}

/// The `ALTER TABLE` statements that give `tables`' key columns
/// [`KeyType::stored`] (a text key with `payments.id`'s collation).
///
/// # Errors
/// [`StoreError`] from the catalog look-up.
async fn alter_key_columns(
    conn: &mut PgConnection,
    key: &KeyType,
    tables: &[String],
) -> Result<String, StoreError> {
    let stored = key.stored();
    let collate = match key.kind() {
        crate::key::KeyKind::Text => id_collation(&mut *conn)
            .await?
            .map(|c| format!(" COLLATE {c}"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    Ok(tables
        .iter()
        .map(|t| {
            format!(
                "ALTER TABLE {t} ALTER COLUMN payment_id TYPE {stored}{collate} USING payment_id::text::{stored};\n"
            )
        })
        .collect())
}

/// `payments.id`'s collation as a qualified, quoted name from the catalog
/// (`"pg_catalog"."C"`), `None` for a type without one.
///
/// # Errors
/// [`StoreError`] from the database.
async fn id_collation(conn: &mut PgConnection) -> Result<Option<String>, StoreError> {
    let found: Option<Option<String>> = super::query_scalar(
        "SELECT quote_ident(n.nspname) || '.' || quote_ident(c.collname)
           FROM pg_attribute a
           JOIN pg_collation c ON c.oid = a.attcollation
           JOIN pg_namespace n ON n.oid = c.collnamespace
          WHERE a.attrelid = to_regclass('payments') AND a.attname = 'id'
            AND NOT a.attisdropped",
    )
    .fetch_optional(conn)
    .await
    .context("reading the collation of payments.id")?;
    Ok(found.flatten())
}

/// Where the walk's SQL compares `payments p` with a position: the columns
/// `ORDER BY` walks, and the condition "after the position" with the key at
/// `$k` and `created_at` at `$c` (unused in a key walk). `None`: the start
/// of a cycle, every row.
pub(crate) fn walk_order(key: &KeyType, alias: &str) -> String {
    match key.walk() {
        crate::key::Walk::Key => format!("{alias}.id"),
        crate::key::Walk::CreatedAt => format!("{alias}.created_at, {alias}.id"),
    }
}

/// The condition of rows strictly after (`op` `>`) or at or before (`op`
/// `<=`) a position whose key is `$k` and `created_at` `$c`, in the walk's
/// order ([`walk_order`]).
/// The `created_at` bound is compared in the column's own type
/// ([`PaymentTimes::created_bound`]: a `timestamp without time zone` column
/// is compared with the position's wall-clock time in the zone), so an
/// index on `payments (created_at, …)` serves it.
pub(crate) fn walk_compare(
    key: &KeyType,
    times: &PaymentTimes,
    alias: &str,
    op: &str,
    (k, c): (u8, u8),
) -> String {
    let k = key.cast(&format!("${k}"));
    match key.walk() {
        crate::key::Walk::Key => format!("{alias}.id {op} {k}"),
        crate::key::Walk::CreatedAt => {
            let bound = times.created_bound(&format!("${c}"));
            format!("({alias}.created_at, {alias}.id) {op} ({bound}, {k})")
        }
    }
}
