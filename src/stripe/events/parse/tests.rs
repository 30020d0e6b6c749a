//! The page parser's tests: the shapes Stripe sends, and every malformed
//! shape the feed tolerates (skipped or counted) or refuses (the page).

use super::*;
use crate::reconcile::ExternalStatus;
use crate::stripe::events::EVENT_TYPES;
use serde_json::json;

fn event(id: &str, pi: &str, status: &str, created: i64) -> Value {
    json!({"id": id, "object": "event", "api_version": "2019-02-19", "created": created,
           "type": format!("payment_intent.{status}"),
           "data": {"object": {"id": pi, "object": "payment_intent", "status": status,
                               "metadata": {"order": "o1", "n": 3}}},
           "livemode": false, "pending_webhooks": 0, "request": {"id": null}})
}

#[test]
fn a_page_keeps_readable_events_and_the_cursor_of_the_last_entry() {
    let page = parse_page(
        &json!({"object": "list", "has_more": true, "url": "/v1/events",
        "data": [event("evt_1", "pi_A", "succeeded", 1_700_000_000),
                 json!({"id": "evt_2", "type": "payment_intent.succeeded", "created": 1,
                        "data": {"object": {"id": "../x"}}}),
                 event("evt_3", "pi_B", "canceled", 1_699_999_999)]}),
    )
    .unwrap();
    assert_eq!(page.events.len(), 2);
    assert_eq!(page.skipped, 1);
    assert!(page.has_more);
    assert_eq!(page.next_after.as_deref(), Some("evt_3"));
    let first = &page.events[0];
    assert_eq!(first.payment_intent.as_str(), "pi_A");
    assert_eq!(first.status, Some(ExternalStatus::parse("succeeded")));
    assert_eq!(first.metadata.get("order").map(String::as_str), Some("o1"));
    assert!(
        !first.metadata.contains_key("n"),
        "non-string metadata is dropped"
    );
}

/// An event whose object is a charge, refund or dispute naming `pi`.
fn money_event(id: &str, event_type: &str, object: &str, pi: Value) -> Value {
    json!({"id": id, "object": "event", "api_version": "2024-06-20", "created": 1_700_000_000,
           "type": event_type,
           "data": {"object": {"id": format!("{object}_1"), "object": object,
                               "amount": 1099, "payment_intent": pi, "status": "succeeded",
                               "metadata": {"order": "o1"}}},
           "livemode": false, "pending_webhooks": 0, "request": {"id": null}})
}

#[test]
fn charge_refund_and_dispute_events_name_their_payment_intent() {
    let page = parse_page(&json!({"object": "list", "has_more": false, "data": [
        money_event("evt_1", "charge.refunded", "charge", json!("pi_A")),
        money_event("evt_2", "refund.created", "refund", json!({"id": "pi_B", "object": "payment_intent"})),
        money_event("evt_3", "charge.dispute.created", "dispute", json!("pi_C")),
        money_event("evt_4", "charge.refund.updated", "refund", Value::Null),
        money_event("evt_5", "charge.dispute.closed", "charge", json!("pi_D")),
        money_event("evt_6", "customer.created", "customer", json!("pi_E")),
    ]}))
    .unwrap();
    let named: Vec<_> = page
        .events
        .iter()
        .map(|e| (e.payment_intent.as_str(), e.object))
        .collect();
    assert_eq!(
        named,
        [
            ("pi_A", EventObject::Charge),
            ("pi_B", EventObject::Refund),
            ("pi_C", EventObject::Dispute)
        ]
    );
    assert!(
        page.events
            .iter()
            .all(|e| e.status.is_none() && e.metadata.is_empty()),
        "a charge's status and metadata are not the PaymentIntent's"
    );
    assert_eq!(
        page.without_payment_intent, 1,
        "the refund of a charge without a PaymentIntent"
    );
    assert_eq!(
        page.skipped, 2,
        "a dispute event carrying a charge, and a type not asked for"
    );
}

#[test]
fn checkout_session_events_name_their_session_and_payment_intent() {
    let session = |id: &str, t: &str, pi: Value, status: &str, paid: &str| {
        json!({"id": id, "object": "event", "created": 1_700_000_000, "type": t,
               "data": {"object": {"id": "cs_test_A1", "object": "checkout.session",
                                   "payment_intent": pi, "status": status,
                                   "payment_status": paid, "metadata": {"order": "o1"}}}})
    };
    let page = parse_page(&json!({"object": "list", "has_more": false, "data": [
        session("evt_1", "checkout.session.completed", json!("pi_A"), "complete", "paid"),
        session("evt_2", "checkout.session.expired", Value::Null, "expired", "unpaid"),
        session("evt_3", "checkout.session.async_payment_failed", json!({"id": "pi_B"}), "complete", "unpaid"),
    ]}))
    .unwrap();
    assert!(page.events.is_empty());
    let got: Vec<_> = page
        .sessions
        .iter()
        .map(|e| {
            (
                e.checkout_session.as_str(),
                e.payment_intent.as_ref().map(|p| p.as_str()),
                e.paid,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("cs_test_A1", Some("pi_A"), true),
            ("cs_test_A1", None, false),
            ("cs_test_A1", Some("pi_B"), false)
        ]
    );
    let as_pi = page.sessions[0].as_payment_intent_event().unwrap();
    assert_eq!(as_pi.status, Some(ExternalStatus::Succeeded));
    assert_eq!(as_pi.object, EventObject::CheckoutSession);
    assert!(page.sessions[1].as_payment_intent_event().is_none());
    assert_eq!(EVENT_TYPES.len(), 20);
}

#[test]
fn a_body_that_is_not_a_list_is_an_error() {
    assert!(parse_page(&json!({"object": "event"})).is_err());
    assert!(parse_page(&json!({"object": "list", "data": []})).is_err());
    let last_without_id = json!({"object": "list", "has_more": false, "data": [{"type": "x"}]});
    assert!(parse_page(&last_without_id).is_err());
}

/// A page of `entries`, no more to read.
fn page_of(entries: Vec<Value>) -> EventPage {
    parse_page(&json!({"object": "list", "has_more": false, "data": entries})).unwrap()
}

/// A well-formed PaymentIntent event, then `change` applied to it.
fn pi_event_with(change: impl FnOnce(&mut Value)) -> Value {
    let mut e = event("evt_1", "pi_A", "succeeded", 1_700_000_000);
    change(&mut e);
    e
}

#[test]
fn an_event_without_a_well_formed_envelope_is_skipped_and_never_fails_its_page() {
    let broken: Vec<Value> = vec![
        pi_event_with(|e| e["id"] = json!("evt_../x")),
        pi_event_with(|e| e["id"] = json!(7)),
        pi_event_with(|e| e.as_object_mut().unwrap().remove("type").map(drop).unwrap()),
        pi_event_with(|e| e["type"] = json!(["payment_intent.succeeded"])),
        pi_event_with(|e| e["created"] = json!("1700000000")),
        pi_event_with(|e| e["created"] = json!(1.7e9)),
        pi_event_with(|e| e["created"] = json!(i64::MAX)),
        pi_event_with(|e| e["data"] = json!(null)),
        pi_event_with(|e| e["data"] = json!([{"id": "pi_A"}])),
        pi_event_with(|e| e["data"] = json!({})),
        pi_event_with(|e| e["data"]["object"] = json!(null)),
        pi_event_with(|e| e["data"]["object"]["object"] = json!(null)),
        pi_event_with(|e| e["data"]["object"]["id"] = json!({"id": "pi_A"})),
        json!(null),
        json!("evt_9"),
        json!(["evt_9", "payment_intent.succeeded", 1_700_000_000, {"object": {"id": "pi_A"}}]),
        event("evt_2", "pi_B", "succeeded", 1_700_000_000),
    ];
    let n = broken.len();
    let page = page_of(broken);
    assert_eq!(page.skipped, n - 1);
    assert_eq!(page.without_payment_intent, 0);
    let read: Vec<_> = page.events.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(read, ["evt_2"]);
}

#[test]
fn a_payment_intent_event_keeps_only_what_is_well_formed_in_its_object() {
    let page = page_of(vec![
        pi_event_with(|e| {
            let object = e["data"]["object"].as_object_mut().unwrap();
            object.remove("object");
            object.insert("status".into(), json!("Succeeded!"));
            object.insert("metadata".into(), json!(["order", "o1"]));
        }),
        pi_event_with(|e| e["data"]["object"]["status"] = json!(7)),
    ]);
    assert_eq!(
        page.skipped, 0,
        "an object that does not name its kind is read"
    );
    let got: Vec<_> = page
        .events
        .iter()
        .map(|e| {
            (
                e.payment_intent.as_str(),
                e.status.clone(),
                e.metadata.len(),
            )
        })
        .collect();
    assert_eq!(got, [("pi_A", None, 0), ("pi_A", None, 1)]);
}

#[test]
fn a_money_event_names_its_payment_intent_only_through_an_id_or_the_expanded_object() {
    let money = |id: &str, pi: Value| money_event(id, "charge.refunded", "charge", pi);
    let mut absent = money("evt_3", Value::Null);
    absent["data"]["object"]
        .as_object_mut()
        .unwrap()
        .remove("payment_intent");
    let mut no_object = money("evt_4", Value::Null);
    no_object["data"]["object"] = Value::Null;
    let page = page_of(vec![
        money("evt_1", json!(42)),
        money("evt_2", json!({"object": "payment_intent"})),
        absent,
        no_object,
        money("evt_5", json!("pi_../x")),
        money("evt_6", json!({"id": "pi_F", "status": "succeeded"})),
    ]);
    assert_eq!(
        page.skipped, 3,
        "a number, an expansion without an id, a malformed id"
    );
    assert_eq!(
        page.without_payment_intent, 2,
        "no payment_intent field, and an object that is not a JSON object"
    );
    let read: Vec<_> = page
        .events
        .iter()
        .map(|e| (e.id.as_str(), e.payment_intent.as_str(), e.status.clone()))
        .collect();
    assert_eq!(read, [("evt_6", "pi_F", None)]);
}

#[test]
fn a_session_event_needs_a_session_id_and_reads_a_malformed_payment_intent_as_none() {
    let session = |id: &str, cs: Value, pi: Value| {
        json!({"id": id, "created": 1_700_000_000, "type": "checkout.session.completed",
               "data": {"object": {"id": cs, "payment_intent": pi, "status": "complete",
                                   "payment_status": "paid", "metadata": {"order": "o1"}}}})
    };
    let page = page_of(vec![
        session("evt_1", json!("pi_A"), json!("pi_A")),
        session("evt_2", json!(null), json!("pi_A")),
        session("evt_3", json!("cs_test_A1"), json!(7)),
        session("evt_4", json!("cs_test_A1"), json!({"id": "pi_../x"})),
        session(
            "evt_5",
            json!("cs_test_A1"),
            json!({"object": "payment_intent"}),
        ),
    ]);
    assert_eq!(page.skipped, 2, "a PaymentIntent's id, no id");
    let got: Vec<_> = page
        .sessions
        .iter()
        .map(|e| {
            (
                e.id.as_str(),
                e.payment_intent.is_none(),
                e.paid,
                e.metadata.len(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("evt_3", true, true, 1),
            ("evt_4", true, true, 1),
            ("evt_5", true, true, 1)
        ]
    );
}

#[test]
fn each_malformed_page_is_refused_with_its_reason_and_an_unreadable_last_event_still_pages() {
    let why = |body: Value| match parse_page(&body) {
        Err(Unavailable::InvalidBody(why)) => why.to_string(),
        other => format!("{other:?}"),
    };
    let list = |data: Value| json!({"object": "list", "has_more": true, "data": data});
    assert_eq!(why(json!([])), InvalidBody::NotAList.to_string());
    assert_eq!(
        why(json!({"object": "list", "has_more": true, "data": {"0": {}}})),
        InvalidBody::ListWithoutData.to_string()
    );
    assert_eq!(
        why(json!({"object": "list", "has_more": null, "data": []})),
        InvalidBody::ListWithoutHasMore.to_string()
    );
    for last in [json!(null), json!({"id": "evt_../x"}), json!({"id": 5})] {
        assert_eq!(
            why(list(json!([event("evt_1", "pi_A", "succeeded", 1), last]))),
            InvalidBody::LastEventWithoutId.to_string()
        );
    }
    let page = parse_page(&list(json!([{"id": "evt_9", "type": "customer.created"}]))).unwrap();
    assert_eq!(
        (page.skipped, page.next_after.as_deref()),
        (1, Some("evt_9"))
    );
    let empty = parse_page(&list(json!([]))).unwrap();
    assert_eq!((empty.has_more, empty.next_after), (true, None));
}
