//! PURE: the key of a `payments` row, whatever its SQL type (docs/keys.md).
//!
//! A key travels as its canonical text, `payments.id::text` (PostgreSQL's
//! output form: `-5`, `018f…-…`, `pay_01H…`), and is cast back to the
//! column's own type ([`KeyType::sql`]) wherever SQL compares it with
//! `payments.id`, so the application's primary-key index is used. The
//! reconciler's own tables hold the key in the application's own type
//! ([`KeyType::stored`]; `bigint` for every integer type), so they compare
//! and order exactly like `payments.id`.

use std::fmt;

/// The key of one payment: its `id::text`. Two keys are equal when their
/// texts are (the application's type gives every value one output text).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(transparent)]
pub struct PaymentKey(String);

impl PaymentKey {
    /// A key from its canonical text (as `payments.id::text` gives it).
    pub fn new(text: impl Into<String>) -> Self {
        PaymentKey(text.into())
    }

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key's JSON form in payloads and `--json` output: a number for an
    /// integer key (so consumers of the outbox written by earlier releases keep
    /// working), a string otherwise.
    pub fn to_json(&self, kind: KeyKind) -> serde_json::Value {
        match (kind, self.0.parse::<i64>()) {
            (KeyKind::Integer, Ok(n)) => serde_json::Value::from(n),
            _ => serde_json::Value::from(self.0.clone()),
        }
    }

    /// A key from a JSON payload: a number (integer keys) or a string.
    /// `None` for anything else.
    pub fn from_json(value: &serde_json::Value) -> Option<Self> {
        match value {
            serde_json::Value::Number(n) if n.is_i64() || n.is_u64() => {
                Some(PaymentKey(n.to_string()))
            }
            serde_json::Value::String(s) if !s.is_empty() => Some(PaymentKey(s.clone())),
            _ => None,
        }
    }

    /// The key as a whole number, when it is one (integer keys): the cursor
    /// gauge and the cycle's progress use it.
    pub fn as_i64(&self) -> Option<i64> {
        self.0.parse().ok()
    }
}

impl fmt::Display for PaymentKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<i64> for PaymentKey {
    fn from(id: i64) -> Self {
        PaymentKey(id.to_string())
    }
}

/// The family of `payments.id`'s type, as the catalog gives it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    /// `smallint`, `integer`, `bigint`.
    Integer,
    /// `numeric`.
    Numeric,
    /// `uuid`.
    Uuid,
    /// `text`, `character varying`.
    Text,
}

/// How a cycle walks `payments` (docs/keys.md, "The walk").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Walk {
    /// In key order (`ORDER BY id`), on the primary key: integer and numeric
    /// keys, which are allocated in time order, and any key when
    /// `payments` has no usable index leading with `created_at`.
    Key,
    /// In `(created_at, id)` order, on the application's index leading with
    /// `created_at`: uuid and text keys, so a batch holds rows created
    /// close together (list mode's ~90 rows per request) even when the keys
    /// are random (uuid v4).
    CreatedAt,
}

/// `payments.id`'s type and how the cycle walks it, detected at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyType {
    sql: String,
    kind: KeyKind,
    walk: Walk,
    /// A text key stored in its own type (`bpchar`, `citext`), not `text`.
    own: Option<String>,
    /// The `(created_at, id)` walk goes over the reconciler's own ordered
    /// copy (`reconciliation_payment_state`), not an index of the
    /// application's ([`KeyType::walking_own_copy`]).
    copy: bool,
}

impl Default for KeyType {
    /// `bigint`, walked in key order (the seed's table).
    fn default() -> Self {
        KeyType {
            sql: "bigint".to_owned(),
            kind: KeyKind::Integer,
            walk: Walk::Key,
            own: None,
            copy: false,
        }
    }
}

/// `payments.id` has a type the reconciler cannot key by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("payments.id is of type {found}; the reconciler keys payments by smallint, integer, bigint, numeric, uuid, text or character varying ids; nothing was created")]
pub struct UnsupportedKey {
    /// `format_type` of the column, e.g. `bytea`.
    pub found: String,
}

impl KeyType {
    /// The key type of a column whose `format_type(atttypid, NULL)` is
    /// `sql`; `created_index`: `payments` has a valid index whose first
    /// column is a NOT NULL `created_at` (then uuid and text keys walk by
    /// it).
    ///
    /// # Errors
    /// [`UnsupportedKey`] for any other type (e.g. `bytea`, `jsonb`, a
    /// domain: the reconciler would have to know its ordering).
    pub fn from_catalog(sql: &str, created_index: bool) -> Result<Self, UnsupportedKey> {
        Self::from_catalog_with_base(sql, sql, None, created_index)
    }

    /// [`Self::from_catalog`] for a column whose type may be a domain
    /// (`base`: its base type's `format_type`, else `sql` again) or an
    /// extension's text type: `citext` (`citext`: `Some(name)`, the name
    /// `format_type` gives it, qualified when off the `search_path`) and
    /// `character(n)` (a ULID in `char(26)`) are text keys walked and stored
    /// in their own type, so the reconciler's tables order them as
    /// `payments.id` does (docs/keys.md); a domain over a supported type is
    /// walked as its base type.
    ///
    /// # Errors
    /// [`UnsupportedKey`] for any other type.
    pub fn from_catalog_with_base(
        sql: &str,
        base: &str,
        citext: Option<&str>,
        created_index: bool,
    ) -> Result<Self, UnsupportedKey> {
        let kind = match base {
            "smallint" | "integer" | "bigint" => KeyKind::Integer,
            "numeric" => KeyKind::Numeric,
            "uuid" => KeyKind::Uuid,
            "text" | "character varying" | "character" => KeyKind::Text,
            b if citext == Some(b) => KeyKind::Text,
            _ => {
                return Err(UnsupportedKey {
                    found: sql.to_owned(),
                })
            }
        };
        let own = match base {
            "character" => Some("bpchar".to_owned()),
            b if citext == Some(b) => Some(b.to_owned()),
            _ => None,
        };
        let walk = match kind {
            KeyKind::Uuid | KeyKind::Text if created_index => Walk::CreatedAt,
            _ => Walk::Key,
        };
        Ok(KeyType {
            sql: if own.is_some() || base == sql {
                sql.to_owned()
            } else {
                base.to_owned()
            },
            kind,
            walk,
            own,
            copy: false,
        })
    }

    /// The walk list mode takes (docs/keys.md, "The walk"): a uuid or text
    /// key walked by key (no index of the application's leads with
    /// `created_at`) walks the reconciler's own ordered copy instead, in
    /// `(created_at, id)` order on `reconciliation_payment_state_walk`
    /// (migration 0021), so a batch is again a narrow window of `created_at`.
    /// Any other key is returned as it is.
    pub fn walking_own_copy(self) -> Self {
        match (self.kind, self.walk) {
            (KeyKind::Uuid | KeyKind::Text, Walk::Key) => KeyType {
                walk: Walk::CreatedAt,
                copy: true,
                ..self
            },
            _ => self,
        }
    }

    /// Whether the `(created_at, id)` walk goes over the reconciler's own
    /// copy ([`KeyType::walking_own_copy`]): its batches read
    /// `reconciliation_payment_state` in that order, and every run first
    /// registers the payments without a state row.
    pub fn own_copy(&self) -> bool {
        self.copy
    }

    /// The type's SQL name without modifiers (`bigint`, `uuid`,
    /// `character varying`): the cast of a bound key back to
    /// `payments.id`'s type (`$1::text::uuid`). Only ever one of the names
    /// [`Self::from_catalog`] accepts, so it is safe in SQL text.
    pub fn sql(&self) -> &str {
        &self.sql
    }

    /// The type's family.
    pub fn kind(&self) -> KeyKind {
        self.kind
    }

    /// How the cycle walks the table.
    pub fn walk(&self) -> Walk {
        self.walk
    }

    /// A short name for index names and logs: `int2`, `int4`, `int8`,
    /// `numeric`, `uuid` or `text` (varchar compares as text).
    pub fn short(&self) -> &'static str {
        match self.sql.as_str() {
            "smallint" => "int2",
            "integer" => "int4",
            "bigint" => "int8",
            "numeric" => "numeric",
            "uuid" => "uuid",
            _ => "text",
        }
    }

    /// The cast of a bound key (text) to the type the reconciler's tables
    /// hold it in, for `expr` (`$n`, or `$n` of a `text[]` for
    /// [`Self::cast_array`]): `($1)::uuid`. It compares with `payments.id`
    /// by the application's index (`bigint` with `integer`: the same integer
    /// operator family).
    pub fn cast(&self, expr: &str) -> String {
        format!("({expr})::{}", self.stored())
    }

    /// [`Self::cast`] of a `text[]` parameter: `($1)::uuid[]`.
    pub fn cast_array(&self, expr: &str) -> String {
        format!("({expr})::{}[]", self.stored())
    }

    /// The type of the reconciler's key columns (`reconciliation_findings`,
    /// `reconciliation_payment_state`, `reconciliation_unverifiable`
    /// `.payment_id`): `bigint` for every integer type (an `integer`
    /// compares exactly with a `bigint`), `text` for `character varying`
    /// (the same ordering and equality), otherwise the application's type.
    pub fn stored(&self) -> &str {
        match (self.kind, &self.own) {
            (KeyKind::Integer, _) => "bigint",
            (KeyKind::Text, Some(own)) => own,
            (KeyKind::Text, None) => "text",
            _ => &self.sql,
        }
    }

    /// [`Self::stored`] as `format_type(atttypid, NULL)` prints it for the
    /// reconciler's key columns (`bpchar` prints as `character`).
    pub fn stored_catalog(&self) -> &str {
        match self.stored() {
            "bpchar" => "character",
            other => other,
        }
    }
}

/// A position in the walk: the key of the last row walked and, in a
/// [`Walk::CreatedAt`] walk, its `created_at`. A cycle starts before every
/// row (`None` in the cursor), never at a sentinel key: ids ≤ 0 are keys
/// like any other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The last row's key.
    pub key: PaymentKey,
    /// The last row's `created_at` (`Walk::CreatedAt` only).
    pub created_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_form_is_a_number_for_integer_keys_only() {
        let k = PaymentKey::new("-9223372036854775808");
        assert_eq!(k.to_json(KeyKind::Integer), serde_json::json!(i64::MIN));
        assert_eq!(
            k.to_json(KeyKind::Text),
            serde_json::json!("-9223372036854775808")
        );
        assert_eq!(
            PaymentKey::from_json(&serde_json::json!(-5)),
            Some(PaymentKey::new("-5"))
        );
        assert_eq!(
            PaymentKey::from_json(&serde_json::json!("pay_1")),
            Some(PaymentKey::new("pay_1"))
        );
        assert_eq!(PaymentKey::from_json(&serde_json::json!(1.5)), None);
        assert_eq!(PaymentKey::from_json(&serde_json::json!(null)), None);
    }

    #[test]
    fn catalog_types() {
        let uuid = KeyType::from_catalog("uuid", true).unwrap();
        assert_eq!(
            (uuid.walk(), uuid.cast("$1")),
            (Walk::CreatedAt, "($1)::uuid".to_owned())
        );
        assert_eq!(
            KeyType::from_catalog("uuid", false).unwrap().walk(),
            Walk::Key
        );
        assert_eq!(
            KeyType::from_catalog("integer", true).unwrap().walk(),
            Walk::Key
        );
        let v = KeyType::from_catalog("character varying", true).unwrap();
        assert_eq!(v.cast("s.payment_id"), "(s.payment_id)::text");
        let small = KeyType::from_catalog("smallint", false).unwrap();
        assert_eq!(small.cast_array("$1"), "($1)::bigint[]");
        assert!(KeyType::from_catalog("bytea", false).is_err());
    }
}
