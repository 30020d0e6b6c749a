//! The arrangement most tests start from, in one place: a payment row as
//! the application wrote it, its PaymentIntent and that PaymentIntent's
//! latest charge as Stripe holds them (held by the one fake Stripe,
//! `stripe_fake`), and
//! a scan over it.
//!
//! ```ignore
//! let p = arrange::payment("pi_Late").local("pending").stripe("succeeded")
//!     .refunded(1099).insert(&pool, &stripe).await;
//! let report = p.scan(&pool, &stripe).await;
//! ```

use serde_json::{json, Value};
use sqlx::PgPool;
use stripe_reconciler::scan::BatchReport;

use super::stripe_fake::StripeFake;
use super::{insert_payment, payment_intent, scan, settings};

/// A Stripe Charge object as `expand[]=latest_charge` returns it (API
/// version 2024-06-20): `amount` captured in full, `amount_refunded` of it
/// refunded, `disputed` as given.
pub fn charge(id: &str, pi: &str, amount: i64, amount_refunded: i64, disputed: bool) -> Value {
    json!({
        "id": id,
        "object": "charge",
        "amount": amount,
        "amount_captured": amount,
        "amount_refunded": amount_refunded,
        "application": null,
        "application_fee": null,
        "application_fee_amount": null,
        "balance_transaction": "txn_3MmlLrLkdIwHu7ix0uke3Ezy",
        "billing_details": {
            "address": {"city": null, "country": null, "line1": null, "line2": null,
                        "postal_code": null, "state": null},
            "email": null, "name": null, "phone": null
        },
        "calculated_statement_descriptor": "Stripe",
        "captured": true,
        "created": chrono::Utc::now().timestamp() - 3500,
        "currency": "usd",
        "customer": null,
        "description": null,
        "disputed": disputed,
        "failure_balance_transaction": null,
        "failure_code": null,
        "failure_message": null,
        "fraud_details": {},
        "livemode": false,
        "metadata": {},
        "on_behalf_of": null,
        "outcome": {
            "network_status": "approved_by_network", "reason": null, "risk_level": "normal",
            "risk_score": 32, "seller_message": "Payment complete.", "type": "authorized"
        },
        "paid": true,
        "payment_intent": pi,
        "payment_method": "pm_1MmlLrLkdIwHu7ixIJwEWSNR",
        "payment_method_details": {
            "card": {"brand": "visa", "country": "US", "exp_month": 3, "exp_year": 2030,
                     "funding": "credit", "last4": "4242", "network": "visa"},
            "type": "card"
        },
        "receipt_email": null,
        "receipt_url": "https://pay.stripe.com/receipts/payment/CAcaFwoVYWNjdF8xTTJKVGtMa2RJd0h1N2l4KOvG06AGMgZfBXyr1aw6LBa9vaaSRWU96d8qBwz9z2J_CObiV_H2-e8RezSK_sw0KISesp4czsOUlVKY",
        "refunded": amount_refunded >= amount,
        "review": null,
        "shipping": null,
        "source_transfer": null,
        "statement_descriptor": null,
        "statement_descriptor_suffix": null,
        "status": "succeeded",
        "transfer_data": null,
        "transfer_group": null
    })
}

/// The fixture PaymentIntent ($10.99, usd) in `status` with `latest_charge`
/// set to `latest_charge` (a charge object, a bare id, or null).
pub fn intent(id: &str, status: &str, latest_charge: Value) -> Value {
    let mut pi = payment_intent(id, status);
    if status == "succeeded" {
        pi["amount_received"] = pi["amount"].clone();
    }
    pi["latest_charge"] = latest_charge;
    pi
}

/// A succeeded PaymentIntent whose charge nothing happened to.
pub fn clean(id: &str) -> Value {
    intent(id, "succeeded", charge("ch_3Clean", id, 1099, 0, false))
}

/// Starts the arrangement of one payment holding PaymentIntent `pi`:
/// locally `paid`, in Stripe `succeeded` with a clean $10.99 charge, last
/// updated an hour ago (past the grace window) unless told otherwise.
pub fn payment(pi: &str) -> PaymentBuilder {
    PaymentBuilder {
        pi: pi.to_owned(),
        local: "paid".to_owned(),
        stripe: "succeeded".to_owned(),
        refunded: 0,
        disputed: false,
        updated_secs_ago: 3600,
        created: None,
        charged: (1099, "usd".to_owned()),
        latest_charge: None,
        fields: Vec::new(),
        columns: json!({}),
    }
}

/// One payment, its PaymentIntent and its charge, to be inserted and held
/// by the fake.
#[derive(Debug, Clone)]
pub struct PaymentBuilder {
    pi: String,
    local: String,
    stripe: String,
    refunded: i64,
    disputed: bool,
    updated_secs_ago: i64,
    created: Option<i64>,
    charged: (i64, String),
    latest_charge: Option<Value>,
    fields: Vec<(String, Value)>,
    columns: Value,
}

impl PaymentBuilder {
    /// `payments.status`, in the application's words (`pending`, `paid`, …).
    pub fn local(mut self, status: &str) -> Self {
        self.local = status.to_owned();
        self
    }

    /// The PaymentIntent's status in Stripe.
    pub fn stripe(mut self, status: &str) -> Self {
        self.stripe = status.to_owned();
        self
    }

    /// Cents of the $10.99 charge refunded.
    pub fn refunded(mut self, cents: i64) -> Self {
        self.refunded = cents;
        self
    }

    /// The charge is disputed.
    pub fn disputed(mut self) -> Self {
        self.disputed = true;
        self
    }

    /// `payments.updated_at` this many seconds ago.
    pub fn updated_secs_ago(mut self, secs: i64) -> Self {
        self.updated_secs_ago = secs;
        self
    }

    /// The PaymentIntent's `created` this many seconds ago (Stripe's clock
    /// for the aging findings; an hour ago unless told), fixed when called.
    pub fn created_secs_ago(mut self, secs: i64) -> Self {
        self.created = Some(chrono::Utc::now().timestamp() - secs);
        self
    }

    /// The PaymentIntent and its charge are for `amount` minor units of
    /// `currency` (lower case, as Stripe writes it) instead of 1099 usd.
    pub fn charged(mut self, amount: i64, currency: &str) -> Self {
        self.charged = (amount, currency.to_owned());
        self
    }

    /// The PaymentIntent's `latest_charge` is `charge` as given (a bare id,
    /// a charge missing a field) instead of the one the builder makes.
    pub fn latest_charge(mut self, charge: Value) -> Self {
        self.latest_charge = Some(charge);
        self
    }

    /// The PaymentIntent's top-level `field` is `value` (e.g.
    /// `capture_method`, `payment_method_types`).
    pub fn field(mut self, field: &str, value: Value) -> Self {
        self.fields.push((field.to_owned(), value));
        self
    }

    /// The payment row's other columns, by name (`{"amount_cents": 1000,
    /// "currency": "JPY"}`), converted to the columns' types by
    /// PostgreSQL (`json_populate_record`); the columns must exist.
    pub fn columns(mut self, values: Value) -> Self {
        self.columns = values;
        self
    }

    /// The PaymentIntent object Stripe answers.
    pub fn stripe_object(&self) -> Value {
        let (amount, currency) = &self.charged;
        let latest = match &self.latest_charge {
            Some(given) => given.clone(),
            None if self.stripe == "succeeded" => {
                let mut c = charge(
                    &format!("ch_3{}", self.pi.trim_start_matches("pi_")),
                    &self.pi,
                    *amount,
                    self.refunded,
                    self.disputed,
                );
                c["currency"] = json!(currency);
                c
            }
            None => Value::Null,
        };
        let mut pi = intent(&self.pi, &self.stripe, latest);
        pi["amount"] = json!(amount);
        pi["currency"] = json!(currency);
        if self.stripe == "succeeded" {
            pi["amount_received"] = json!(amount);
        }
        if let Some(created) = self.created {
            pi["created"] = json!(created);
        }
        for (field, value) in &self.fields {
            pi[field.as_str()] = value.clone();
        }
        pi
    }

    /// Inserts the payment row (and its other columns) and adds its
    /// PaymentIntent to the one fake Stripe, which answers it by Stripe's
    /// rules (retrieve with `expand[]`, list pages).
    pub async fn insert(self, pool: &PgPool, stripe: &StripeFake) -> Arranged {
        let id = insert_payment(pool, &self.pi, &self.local, self.updated_secs_ago).await;
        set_columns(pool, id, &self.columns).await;
        let object = self.stripe_object();
        stripe.add_object(None, object.clone());
        Arranged {
            id,
            pi: self.pi,
            object,
        }
    }
}

/// Sets the columns named in `values` (a JSON object) of payment `id`.
async fn set_columns(pool: &PgPool, id: i64, values: &Value) {
    let names: Vec<&String> = values.as_object().unwrap().keys().collect();
    if names.is_empty() {
        return;
    }
    let set: Vec<String> = names.iter().map(|n| format!("{n} = r.{n}")).collect();
    sqlx::query(&format!(
        "UPDATE payments p SET {}
           FROM json_populate_record(NULL::payments, $2::json) r
          WHERE p.id = $1",
        set.join(", ")
    ))
    .bind(id)
    .bind(values)
    .execute(pool)
    .await
    .unwrap();
}

/// An arranged payment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arranged {
    /// `payments.id`.
    pub id: i64,
    /// Its PaymentIntent id.
    pub pi: String,
    /// The PaymentIntent object mounted for it.
    pub object: Value,
}

impl Arranged {
    /// One write-mode batch (`settings(200)`) over the table, expected to commit.
    pub async fn scan(&self, pool: &PgPool, stripe: &StripeFake) -> BatchReport {
        scan(pool, stripe, &settings(200)).await
    }
}

/// The bulk arrangement of the binary-level tests: `n` payments `pi_1` …
/// `pi_n` (ids 1 … n), `paid`, last updated an hour ago, except the ids in
/// `pending`, which the application left `pending`: with a Stripe that
/// answers `succeeded` for every PaymentIntent (`stripe_answering`), each of
/// those is one missed success, one finding and one repair command.
pub async fn paid_with_pending(pool: &PgPool, n: i64, pending: &[i64]) {
    super::insert_paid(pool, n).await;
    sqlx::query("UPDATE payments SET status = 'pending' WHERE id = ANY($1)")
        .bind(pending)
        .execute(pool)
        .await
        .unwrap();
}
