//! Text of the application's `payments` read so that it cannot fail (issue
//! 30, "one stray byte stops the scan").
//!
//! A `SQL_ASCII` database (common in old installs) stores any byte: a row
//! may hold `0xff` in `status`, in the PaymentIntent column or in
//! `order_id`. Selected as text, PostgreSQL refuses to send it to a UTF-8
//! client (`invalid byte sequence for encoding "UTF8"`) and the whole
//! statement fails: the batch, or `findings list` for the whole queue. So
//! those columns are selected as their bytes ([`bytes_sql`]:
//! `convert_to(…, 'SQL_ASCII')`, which PostgreSQL never converts nor
//! validates, in any database encoding) and decoded here ([`decode`]): valid
//! UTF-8 as it is, every byte that is not part of valid UTF-8 as `\xNN`. The
//! result is valid UTF-8 (so JSON and the reconciler's own tables take it),
//! shows the byte a person must fix, and is never a well-formed id (a
//! backslash is in no Stripe id), so such a PaymentIntent id is an
//! `invalid_payment_intent_id` finding.

use std::fmt::Write as _;

use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type, ValueRef};

/// `expr` (a text, `varchar` or `char` column, or any expression castable
/// to text) as the SQL of its bytes (`bytea`), for [`StoredText`]. Never
/// fails, whatever the bytes and the database's encoding.
pub(crate) fn bytes_sql(expr: &str) -> String {
    format!("convert_to(({expr})::text, 'SQL_ASCII')")
}

/// `bytes` as text: valid UTF-8 unchanged (borrowed work only when needed),
/// each byte of an invalid sequence as `\xNN` (lower-case hex).
pub fn decode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            // Writing into a String cannot fail.
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A nullable text column read as bytes ([`bytes_sql`]) and decoded with
/// [`decode`]: `None` for NULL. For `#[sqlx(try_from = "StoredText")]` on an
/// `Option<String>` field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredText(pub Option<String>);

impl Type<Postgres> for StoredText {
    fn type_info() -> PgTypeInfo {
        <Vec<u8> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <Vec<u8> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for StoredText {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        if value.is_null() {
            return Ok(StoredText(None));
        }
        let bytes = <&[u8] as Decode<Postgres>>::decode(value)?;
        Ok(StoredText(Some(decode(bytes))))
    }
}

impl From<StoredText> for Option<String> {
    fn from(text: StoredText) -> Self {
        text.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_utf8_is_kept_as_it_is() {
        for s in ["", "pi_3MtwBwLkdIwHu7ix28a3tqPa", "Zoë 東京 💳", r"a\xff"] {
            assert_eq!(decode(s.as_bytes()), s);
        }
    }

    #[test]
    fn each_stray_byte_becomes_its_escape() {
        assert_eq!(decode(b"pi_\xff"), r"pi_\xff");
        assert_eq!(decode(b"pa\xffid"), r"pa\xffid");
        assert_eq!(decode(b"\xc3"), r"\xc3", "a truncated sequence");
        assert_eq!(decode(b"\xc3\xa9\xe9"), r"é\xe9", "latin-1 after UTF-8");
        assert_eq!(decode(b"\xff\xfe"), r"\xff\xfe");
    }

    #[test]
    fn a_decoded_id_is_never_a_well_formed_payment_intent_id() {
        let id = decode(b"pi_3MtwBwLkdIwHu7ix28a3t\xff");
        assert!(crate::stripe::PaymentIntentId::parse(&id).is_err(), "{id}");
    }
}
