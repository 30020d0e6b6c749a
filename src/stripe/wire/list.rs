//! A Stripe list page: `{"object": "list", "data": [...], "has_more": bool}`.

use serde::de::{Deserialize, DeserializeOwned, Deserializer};
use serde::Deserialize as DeriveDeserialize;
use serde_json::Value;

use super::field::Field;
use crate::stripe::error::InvalidBody;

/// A list endpoint's body, each item of `data` read on its own.
#[derive(Debug, DeriveDeserialize)]
#[serde(bound = "T: DeserializeOwned")]
pub(crate) struct WireList<T> {
    #[serde(default)]
    object: Field<String>,
    #[serde(default)]
    data: Items<T>,
    #[serde(default)]
    has_more: Field<bool>,
}

/// A list's `data`: `None` when absent or not an array; each item a
/// [`Field`], so one malformed item spoils only itself.
#[derive(Debug)]
struct Items<T>(Option<Vec<Field<T>>>);

impl<T> Default for Items<T> {
    fn default() -> Self {
        Items(None)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Items<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Items(match Value::deserialize(d)? {
            Value::Array(items) => Some(items.iter().map(Field::of).collect()),
            _ => None,
        }))
    }
}

impl<T: DeserializeOwned> WireList<T> {
    /// `body` as a Stripe list: its items, in order, and `has_more`.
    ///
    /// # Errors
    /// Checked in this order: [`InvalidBody::NotAList`] (not an object whose
    /// `object` is `"list"`), [`InvalidBody::ListWithoutData`] (no `data`
    /// array), [`InvalidBody::ListWithoutHasMore`] (no boolean `has_more`).
    pub fn read(body: &Value) -> Result<(Vec<Field<T>>, bool), InvalidBody> {
        let Field::Is(list) = Field::<Self>::of(body) else {
            return Err(InvalidBody::NotAList);
        };
        if list.object.get().map(String::as_str) != Some("list") {
            return Err(InvalidBody::NotAList);
        }
        let data = list.data.0.ok_or(InvalidBody::ListWithoutData)?;
        let has_more = *list.has_more.get().ok_or(InvalidBody::ListWithoutHasMore)?;
        Ok((data, has_more))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(body: Value) -> Result<(Vec<Field<String>>, bool), InvalidBody> {
        WireList::<String>::read(&body)
    }

    #[test]
    fn a_list_keeps_each_item_as_it_came() {
        let (data, has_more) =
            read(json!({"object": "list", "data": ["a", 1, null], "has_more": true})).unwrap();
        assert_eq!(data, [Field::Is("a".into()), Field::Other, Field::Null]);
        assert!(has_more);
    }

    #[test]
    fn a_body_that_is_not_a_list_is_refused_with_the_first_thing_missing() {
        let why = |body: Value| read(body).unwrap_err();
        assert!(matches!(
            why(json!(["list", [], true])),
            InvalidBody::NotAList
        ));
        assert!(matches!(why(json!({"object": 5})), InvalidBody::NotAList));
        assert!(matches!(
            why(json!({"object": "list", "data": {}, "has_more": true})),
            InvalidBody::ListWithoutData
        ));
        assert!(matches!(
            why(json!({"object": "list", "data": [], "has_more": "yes"})),
            InvalidBody::ListWithoutHasMore
        ));
    }
}
