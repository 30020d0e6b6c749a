//! A request's query parameters, and Stripe's 400 for one it cannot use.

use serde_json::{json, Value};
use wiremock::ResponseTemplate;

/// The query pairs of one request.
pub(super) type Query = Vec<(String, String)>;

pub(super) fn get(q: &Query, k: &str) -> Option<String> {
    q.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
}

pub(super) fn all(q: &Query, k: &str) -> Vec<String> {
    q.iter()
        .filter(|(n, _)| n == k)
        .map(|(_, v)| v.clone())
        .collect()
}

/// Stripe's 400 for a query parameter it cannot use.
pub(super) fn invalid(code: &str, message: &str) -> Box<ResponseTemplate> {
    Box::new(
        ResponseTemplate::new(400)
            .insert_header("Request-Id", "req_invalid")
            .set_body_json(
                json!({"error": {"type": "invalid_request_error", "code": code,
            "message": message, "doc_url": format!("https://stripe.com/docs/error-codes/{code}")}}),
            ),
    )
}

/// `[gte, lt)` from `created[gte|gt|lte|lt]`, or Stripe's 400.
pub(super) fn created_range(q: &Query) -> Result<(i64, i64), Box<ResponseTemplate>> {
    let (mut gte, mut lt) = (i64::MIN, i64::MAX);
    for (k, v) in q {
        let Some(op) = k.strip_prefix("created[").and_then(|r| r.strip_suffix(']')) else {
            continue;
        };
        let n: i64 = v.parse().map_err(|_| {
            invalid(
                "parameter_invalid_integer",
                &format!("Invalid integer: {v}"),
            )
        })?;
        match op {
            "gte" => gte = gte.max(n),
            "gt" => gte = gte.max(n.saturating_add(1)),
            "lte" => lt = lt.min(n.saturating_add(1)),
            "lt" => lt = lt.min(n),
            _ => {
                return Err(invalid(
                    "parameter_unknown",
                    &format!("Received unknown parameter: {k}"),
                ))
            }
        }
    }
    Ok((gte, lt))
}

/// `limit`: 1 to 100, default 10.
pub(super) fn limit(q: &Query) -> Result<usize, Box<ResponseTemplate>> {
    match get(q, "limit") {
        None => Ok(10),
        Some(v) => match v.parse::<usize>() {
            Ok(n) if (1..=100).contains(&n) => Ok(n),
            _ => Err(invalid(
                "parameter_invalid_integer",
                &format!("Invalid limit: must be between 1 and 100 ({v})"),
            )),
        },
    }
}

/// One page of `items` (newest first) after `starting_after`.
pub(super) fn page(items: &[&Value], q: &Query, url: &str) -> Result<Value, Box<ResponseTemplate>> {
    let limit = limit(q)?;
    let from = match get(q, "starting_after") {
        Some(after) => match items.iter().position(|o| o["id"] == after.as_str()) {
            Some(p) => p + 1,
            None => {
                return Err(invalid(
                    "resource_missing",
                    &format!("No such object: '{after}'"),
                ))
            }
        },
        None => 0,
    };
    let data: Vec<Value> = items
        .iter()
        .skip(from)
        .take(limit)
        .map(|o| (*o).clone())
        .collect();
    let has_more = items.len() > from + data.len();
    Ok(json!({"object": "list", "data": data, "has_more": has_more, "url": url}))
}
