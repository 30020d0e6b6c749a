//! One JSON field of a Stripe object, read without ever failing.

use serde::de::{Deserialize, DeserializeOwned, Deserializer};
use serde_json::Value;

/// One field of a Stripe object as it came: absent, `null`, of the expected
/// shape, or anything else. Reading a `Field` never fails, so one odd field
/// never spoils the object around it; the reader decides what each case
/// means (an event without an id is unreadable, a refund whose
/// `payment_intent` is `null` names none).
///
/// A JSON array is never of the expected shape: no field read through
/// `Field` is a list, and serde would otherwise read an array as a struct's
/// fields in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) enum Field<T> {
    /// The key is not in the object.
    #[default]
    Absent,
    /// `null`.
    Null,
    /// A value of the expected shape.
    Is(T),
    /// A value of another shape.
    Other,
}

impl<T> Field<T> {
    /// The value, when it has the expected shape.
    pub fn get(&self) -> Option<&T> {
        match self {
            Field::Is(v) => Some(v),
            _ => None,
        }
    }
}

impl Field<String> {
    /// The text, when the field is a string.
    pub fn as_str(&self) -> Option<&str> {
        self.get().map(String::as_str)
    }
}

impl<T: DeserializeOwned> Field<T> {
    /// `value` read as a `T`.
    pub fn of(value: &Value) -> Self {
        match value {
            Value::Null => Field::Null,
            Value::Array(_) => Field::Other,
            v => T::deserialize(v).map_or(Field::Other, Field::Is),
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(|v| Field::of(&v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Pair {
        #[serde(default)]
        a: Field<String>,
        #[serde(default)]
        b: Field<i64>,
    }

    #[test]
    fn every_shape_of_a_field_reads_without_failing_its_object() {
        let read = |v: Value| Field::<Pair>::of(&v);
        let pair = |a, b| Field::Is(Pair { a, b });
        assert_eq!(
            read(json!({"a": "x", "b": 2})),
            pair(Field::Is("x".into()), Field::Is(2))
        );
        assert_eq!(
            read(json!({"a": null, "b": "2"})),
            pair(Field::Null, Field::Other)
        );
        assert_eq!(read(json!({})), pair(Field::Absent, Field::Absent));
        assert_eq!(read(json!({"b": 1.5})), pair(Field::Absent, Field::Other));
        assert_eq!(read(json!(null)), Field::Null);
        assert_eq!(read(json!("x")), Field::Other);
        assert_eq!(
            read(json!(["x", 2])),
            Field::Other,
            "an array is not read as the struct's fields in order"
        );
    }
}
