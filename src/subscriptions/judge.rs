//! One row's verdict, findings and repair from its Stripe answer: the
//! stored row in classification's terms, [`judge_subscription`] applied,
//! and what phase 3 writes of it (docs/subscriptions.md, "Finding kinds").

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use crate::config::SubscriptionSettings;
use crate::facts::SubscriptionTable;
use crate::key::PaymentKey;
use crate::reconcile::subscription::{
    judge_subscription, SubscriptionFacts, SubscriptionJudgement, SubscriptionRow,
};
use crate::reconcile::Verdict;
use crate::store::subscriptions::read::StoredSubscription;
use crate::store::subscriptions::record::NewFinding;
use crate::store::subscriptions::writer::{Carried, Values};

/// What Stripe answered for one row.
#[derive(Debug)]
pub enum Answer {
    /// The subscription.
    Found(SubscriptionFacts),
    /// `resource_missing`.
    Missing,
    /// No answer (the reason, for the log).
    Unverifiable(String),
}

/// One row judged: its verdict, its findings and its repair, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    /// The row's key.
    pub key: PaymentKey,
    /// Its verdict.
    pub verdict: Verdict,
    /// Stripe's status when Stripe answered with the subscription (the row
    /// is then confirmed).
    pub confirmed: Option<String>,
    /// The findings to record.
    pub findings: Vec<NewFinding>,
    /// Kinds of those findings that the repair resolves.
    pub repairable: Vec<String>,
    /// The repair: the values the scan saw, Stripe's, and which are carried.
    pub repair: Option<(Values, Values, Carried)>,
}

fn at(secs: Option<i64>) -> Option<DateTime<Utc>> {
    secs.and_then(|s| DateTime::from_timestamp(s, 0))
}

/// The stored row in classification's terms (only configured columns).
pub fn app_row(row: &StoredSubscription, table: &SubscriptionTable) -> SubscriptionRow {
    SubscriptionRow {
        status: table.status.as_ref().map(|_| row.status.clone()),
        period_end: table.period_end.as_ref().map(|_| at(row.period_end)),
        ends_at: table.ends_at.as_ref().map(|_| at(row.ends_at)),
        price: table.price.as_ref().map(|_| row.price.clone()),
        quantity: table.quantity.as_ref().map(|_| row.quantity),
    }
}

/// The row's status as findings show it: its word, or `(none)` without a
/// status column.
fn local_word(row: &StoredSubscription, table: &SubscriptionTable) -> String {
    match (&table.status, &row.status) {
        (None, _) => "(no status column)".to_owned(),
        (Some(_), Some(word)) => word.clone(),
        (Some(_), None) => "NULL".to_owned(),
    }
}

/// Judges `row` on `answer` at `now`.
pub fn judge(
    row: &StoredSubscription,
    answer: &Answer,
    (table, settings): (&SubscriptionTable, &SubscriptionSettings),
    now: DateTime<Utc>,
) -> Judged {
    let app = app_row(row, table);
    let mut judged = Judged {
        key: row.key.clone(),
        verdict: Verdict::Unverifiable,
        confirmed: None,
        findings: Vec::new(),
        repairable: Vec::new(),
        repair: None,
    };
    let stripe = match answer {
        Answer::Unverifiable(_) => return judged,
        Answer::Missing => None,
        Answer::Found(facts) => {
            judged.confirmed = Some(facts.status.as_str().to_owned());
            Some(facts)
        }
    };
    let j = judge_subscription(&app, stripe, settings.policy(), now);
    judged.verdict = j.verdict;
    if let Some(reason) = &j.unverifiable {
        tracing::info!(key = %row.key, %reason, "subscription row unverifiable");
        judged.confirmed = None;
        return judged;
    }
    let local = local_word(row, table);
    judged.findings = findings(row, &j, stripe, &local);
    judged.repairable = j
        .findings
        .iter()
        .filter(|f| f.verdict == Verdict::Repairable)
        .map(|f| f.kind.as_str().into_owned())
        .collect();
    if let Some(state) = &j.repair {
        let expected = Values {
            status: row.status.clone(),
            period_end: row.period_end,
            ends_at: row.ends_at,
        };
        let apply = Values {
            status: state.status.clone(),
            period_end: state.period_end.flatten().map(|t| t.timestamp()),
            ends_at: state.ends_at.flatten().map(|t| t.timestamp()),
        };
        let carried = Carried {
            status: state.status.is_some(),
            period_end: state.period_end.is_some(),
            ends_at: state.ends_at.is_some(),
        };
        judged.repair = Some((expected, apply, carried));
    }
    judged
}

fn findings(
    row: &StoredSubscription,
    j: &SubscriptionJudgement,
    stripe: Option<&SubscriptionFacts>,
    local: &str,
) -> Vec<NewFinding> {
    j.findings
        .iter()
        .map(|f| {
            let kind = f.kind.as_str();
            let mut details = json!({
                "differs": differs(&kind, row, stripe, local),
                "verdict": f.verdict.as_str(),
                "money_at_risk": f.money_at_risk,
            });
            if let Some(note) = &f.note {
                details["note"] = Value::from(note.as_str());
            }
            if let Some(s) = stripe {
                details["stripe"] = stripe_values(s);
            }
            NewFinding {
                key: Some(row.key.clone()),
                stripe_id: row.stripe_id.clone(),
                kind: kind.to_string(),
                local_status: local.to_owned(),
                external_status: stripe.map(|s| s.status.as_str().to_owned()),
                details,
                account: row.account.clone().filter(|a| !a.trim().is_empty()),
            }
        })
        .collect()
}

fn iso(t: Option<DateTime<Utc>>) -> Value {
    t.map_or(Value::Null, |t| Value::from(t.to_rfc3339()))
}

/// Stripe's values a person compares with the row.
pub fn stripe_values(s: &SubscriptionFacts) -> Value {
    json!({
        "status": s.status.as_str(),
        "period_end": iso(s.period_end()),
        "ends_at": iso(s.ends_at()),
        "cancel_at_period_end": s.cancel_at_period_end,
        "prices": s.items.iter().filter_map(|i| i.price.clone()).collect::<Vec<_>>(),
        "quantities": s.items.iter().map(|i| i.quantity).collect::<Vec<_>>(),
    })
}

/// `{field, local, stripe}` for a kind.
fn differs(
    kind: &str,
    row: &StoredSubscription,
    stripe: Option<&SubscriptionFacts>,
    local: &str,
) -> Value {
    let (field, mine, theirs) = match kind {
        "subscription_period_stale" => (
            "period_end",
            iso(at(row.period_end)),
            iso(stripe.and_then(SubscriptionFacts::period_end)),
        ),
        "subscription_cancel_scheduled" => (
            "ends_at",
            iso(at(row.ends_at)),
            iso(stripe.and_then(SubscriptionFacts::ends_at)),
        ),
        "subscription_price_mismatch" => (
            "price",
            row.price.clone().map_or(Value::Null, Value::from),
            stripe.map_or(Value::Null, |s| {
                Value::from(
                    s.items
                        .iter()
                        .filter_map(|i| i.price.clone())
                        .collect::<Vec<_>>()
                        .join(", "),
                )
            }),
        ),
        "subscription_quantity_mismatch" => (
            "quantity",
            row.quantity.map_or(Value::Null, Value::from),
            stripe
                .and_then(|s| s.item_for(row.price.as_deref()))
                .and_then(|i| i.quantity)
                .map_or(Value::Null, Value::from),
        ),
        "subscription_missing_externally" => ("subscription", Value::from(local), Value::Null),
        _ => (
            "status",
            Value::from(local),
            stripe.map_or(Value::Null, |s| Value::from(s.status.as_str())),
        ),
    };
    // Text, as the view's `differs` shows it.
    let text = |v: Value| match v {
        Value::Null | Value::String(_) => v,
        other => Value::from(other.to_string()),
    };
    json!({"field": field, "local": text(mine), "stripe": text(theirs)})
}
