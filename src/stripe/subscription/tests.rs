use serde_json::{json, Value};

use super::*;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/subscription.json"
    );
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn at(secs: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp(secs, 0)
}

#[test]
fn stripes_own_fixture_reads_from_its_item() {
    let s = parse_subscription(fixture(), None).unwrap();
    assert_eq!(s.id.as_str(), "sub_1Pgc6rB7WZ01zgkWNy0Cn5nw");
    assert_eq!(s.customer.as_deref(), Some("cus_QXg1o8vcGmoR32"));
    assert_eq!(s.account, None);
    let f = &s.facts;
    assert_eq!(f.status, SubscriptionStatus::Active);
    assert_eq!(f.current_period_end, None, "no top-level period in basil");
    assert_eq!(f.period_end(), at(976_287_773), "the item's");
    assert_eq!(f.items.len(), 1);
    assert_eq!(
        f.items[0].price.as_deref(),
        Some("price_1PgafmB7WZ01zgkW6dKueIc5")
    );
    assert_eq!(f.items[0].quantity, Some(1));
    assert!(f.cancel_at_period_end);
    assert_eq!(f.cancel_at, at(1_234_567_890));
    assert_eq!(f.ended_at, at(1_234_567_890));
    assert_eq!(f.ends_at(), at(1_234_567_890));
    assert_eq!(f.trial_end, at(1_234_567_890));
    assert_eq!(s.created, at(1_234_567_890));
}

#[test]
fn older_versions_and_emulators() {
    let mut v = fixture();
    v["current_period_end"] = json!(1_800_000_000);
    v["items"]["data"][0]
        .as_object_mut()
        .unwrap()
        .remove("current_period_end");
    v["items"]["data"][0]
        .as_object_mut()
        .unwrap()
        .remove("price");
    v["status"] = json!("some_new_status");
    v["customer"] = json!({"id": "cus_X", "object": "customer"});
    let account = AccountId::parse("acct_1Connected").unwrap();
    let s = parse_subscription(v, Some(&account)).unwrap();
    assert_eq!(
        s.facts.period_end(),
        at(1_800_000_000),
        "top-level fallback"
    );
    assert_eq!(
        s.facts.items[0].price.as_deref(),
        Some("obj_123"),
        "plan.id"
    );
    assert_eq!(
        s.facts.status,
        SubscriptionStatus::Unknown("some_new_status".into())
    );
    assert_eq!(s.customer.as_deref(), Some("cus_X"));
    assert_eq!(s.account, Some(account));
}

#[test]
fn a_minimal_object_and_what_is_refused() {
    let s = parse_subscription(json!({"id": "sub_1", "status": "canceled"}), None).unwrap();
    assert!(s.facts.items.is_empty() && !s.facts.cancel_at_period_end);
    assert_eq!(s.facts.ends_at(), None);
    for (value, why) in [
        (
            json!({"id": "sub_1", "object": "invoice", "status": "paid"}),
            "invoice",
        ),
        (json!({"id": "pi_1", "status": "active"}), "sub_"),
        (json!({"id": "sub_1"}), "status"),
        (
            json!({"id": "sub_1", "status": "active", "ended_at": "soon"}),
            "Subscription",
        ),
        (
            json!({"id": "sub_1", "status": "active", "cancel_at": i64::MAX}),
            "cancel_at",
        ),
    ] {
        let e = parse_subscription(value, None).unwrap_err();
        assert!(e.to_string().contains(why), "{why}: {e}");
    }
}

#[test]
fn ids_are_validated_before_any_request() {
    assert!(SubscriptionId::parse("sub_1Pgc6rB7WZ01zgkWNy0Cn5nw").is_ok());
    assert!(SubscriptionId::parse("sub_sched_1").is_ok());
    for (bad, why) in [
        ("", InvalidSubscriptionId::Empty),
        ("pi_123", InvalidSubscriptionId::WrongPrefix),
        ("sub_", InvalidSubscriptionId::BadCharacters),
        ("sub_../x", InvalidSubscriptionId::BadCharacters),
        ("sub_a b", InvalidSubscriptionId::BadCharacters),
    ] {
        assert_eq!(SubscriptionId::parse(bad).unwrap_err(), why, "{bad:?}");
    }
    let long = format!("sub_{}", "a".repeat(300));
    assert_eq!(
        SubscriptionId::parse(&long).unwrap_err(),
        InvalidSubscriptionId::TooLong(304)
    );
}

#[test]
fn an_invoice_names_its_subscription_in_either_api_version() {
    let basil = json!({"object": "invoice", "parent": {"type": "subscription_details",
        "subscription_details": {"subscription": "sub_New"}}});
    let older =
        json!({"object": "invoice", "subscription": {"id": "sub_Old", "object": "subscription"}});
    let both = json!({"parent": {"subscription_details": {"subscription": null}}, "subscription": "sub_B"});
    let none = json!({"object": "invoice", "parent": null, "subscription": null});
    let other = json!({"subscription": "pi_123"});
    let id = |v: &Value| invoice_subscription(v).map(|s| s.as_str().to_owned());
    assert_eq!(id(&basil).as_deref(), Some("sub_New"));
    assert_eq!(id(&older).as_deref(), Some("sub_Old"));
    assert_eq!(id(&both).as_deref(), Some("sub_B"));
    assert_eq!(id(&none), None);
    assert_eq!(id(&other), None);
}
