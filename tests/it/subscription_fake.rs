//! The fake Stripe's subscriptions answer as Stripe does
//! (docs/subscriptions.md, "Reading Stripe"): retrieve returns canceled ones
//! too; a list without `status=all` leaves canceled and
//! `incomplete_expired` ones out; `limit`, `starting_after`, `created`
//! windows and `Stripe-Account` behave as for PaymentIntents. Every object
//! it serves parses with the binary's own Subscription reader.

use serde_json::Value;
use stripe_reconciler::reconcile::subscription::SubscriptionStatus;
use stripe_reconciler::stripe::{parse_subscription, AccountId};

use crate::support::stripe_fake::{
    subscription, subscription_event, StripeFake, SUBSCRIPTION_LIST, SUBSCRIPTION_RETRIEVE,
};

async fn get(fake: &StripeFake, path: &str, account: Option<&str>) -> (u16, Value) {
    let mut req = reqwest::Client::new().get(format!("{}{path}", fake.uri()));
    if let Some(a) = account {
        req = req.header("Stripe-Account", a);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap())
}

fn ids(page: &Value) -> Vec<&str> {
    page["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["id"].as_str().unwrap())
        .collect()
}

/// Four subscriptions, one per second from 1,000: active, past_due,
/// canceled, incomplete_expired (newest last).
async fn four() -> StripeFake {
    let fake = StripeFake::start().await;
    for (i, status) in ["active", "past_due", "canceled", "incomplete_expired"]
        .iter()
        .enumerate()
    {
        fake.add_subscription(None, &format!("sub_{i}"), status, 1_000 + i as i64);
    }
    fake
}

#[tokio::test]
async fn retrieve_returns_canceled_ones_and_404s_the_unknown() {
    let fake = four().await;
    let (status, body) = get(&fake, "/v1/subscriptions/sub_2", None).await;
    assert_eq!(status, 200);
    let sub = parse_subscription(body, None).unwrap();
    assert_eq!(sub.facts.status, SubscriptionStatus::Canceled);
    assert!(sub.facts.ended_at.is_some() && sub.facts.period_end().is_some());
    let (status, body) = get(&fake, "/v1/subscriptions/sub_0", None).await;
    assert_eq!(status, 200);
    let active = parse_subscription(body, None).unwrap();
    assert_eq!(active.facts.items[0].price.as_deref(), Some("price_pro"));
    assert!(active.facts.period_end() > Some(chrono::Utc::now()));
    assert_eq!(active.facts.ends_at(), None, "renews");
    let (status, body) = get(&fake, "/v1/subscriptions/sub_nope", None).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "resource_missing");
    assert_eq!(fake.count(SUBSCRIPTION_RETRIEVE), 3);
}

#[tokio::test]
async fn a_list_without_status_all_leaves_the_ended_ones_out() {
    let fake = four().await;
    let list = |q: &'static str| {
        let fake = &fake;
        async move { get(fake, &format!("/v1/subscriptions?limit=100{q}"), None).await }
    };
    let (_, default) = list("").await;
    assert_eq!(
        ids(&default),
        ["sub_1", "sub_0"],
        "newest first, no ended ones"
    );
    let (_, all) = list("&status=all").await;
    assert_eq!(ids(&all), ["sub_3", "sub_2", "sub_1", "sub_0"]);
    let (_, ended) = list("&status=ended").await;
    assert_eq!(ids(&ended), ["sub_3", "sub_2"]);
    let (_, canceled) = list("&status=canceled").await;
    assert_eq!(ids(&canceled), ["sub_2"]);
    assert_eq!(all["object"], "list");
    assert_eq!(all["url"], "/v1/subscriptions");
    for item in all["data"].as_array().unwrap() {
        parse_subscription(item.clone(), None).unwrap();
    }
    fake.allow_failed_list_pages();
    let (status, body) = list("&status=cancelled").await;
    assert_eq!(status, 400);
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("status"));
    let sent: Vec<Option<String>> = fake
        .seen()
        .iter()
        .filter(|s| s.endpoint == SUBSCRIPTION_LIST)
        .map(|s| s.list_status.clone())
        .collect();
    assert_eq!(sent[..2], [None, Some("all".into())]);
}

#[tokio::test]
async fn limit_pages_and_created_windows() {
    let fake = StripeFake::start().await;
    for i in 0..5 {
        fake.add_subscription(None, &format!("sub_p{i}"), "active", 2_000 + i);
    }
    let mut after: Option<String> = None;
    let mut pages = Vec::new();
    loop {
        let q = match &after {
            Some(a) => format!("/v1/subscriptions?status=all&limit=2&starting_after={a}"),
            None => "/v1/subscriptions?status=all&limit=2".to_owned(),
        };
        let (status, page) = get(&fake, &q, None).await;
        assert_eq!(status, 200);
        let got: Vec<String> = ids(&page).iter().map(|s| s.to_string()).collect();
        after = got.last().cloned();
        pages.push(got);
        if page["has_more"] != true {
            break;
        }
    }
    assert_eq!(
        pages,
        [
            vec!["sub_p4", "sub_p3"],
            vec!["sub_p2", "sub_p1"],
            vec!["sub_p0"]
        ]
    );
    let (_, window) = get(
        &fake,
        "/v1/subscriptions?status=all&created[gte]=2001&created[lte]=2003",
        None,
    )
    .await;
    assert_eq!(ids(&window), ["sub_p3", "sub_p2", "sub_p1"]);
    let (_, default_limit) = get(&fake, "/v1/subscriptions", None).await;
    assert_eq!(ids(&default_limit).len(), 5, "default limit 10");
    fake.allow_failed_list_pages();
    for bad in ["limit=0", "limit=101", "starting_after=sub_unknown"] {
        let (status, _) = get(&fake, &format!("/v1/subscriptions?{bad}"), None).await;
        assert_eq!(status, 400, "{bad}");
    }
}

#[tokio::test]
async fn a_connected_accounts_subscriptions_are_its_own() {
    let fake = StripeFake::start().await;
    fake.add_subscription(Some("acct_1Conn"), "sub_conn", "canceled", 3_000);
    fake.add_subscription(None, "sub_platform", "active", 3_000);
    let (status, body) = get(&fake, "/v1/subscriptions/sub_conn", Some("acct_1Conn")).await;
    assert_eq!(status, 200);
    let account = AccountId::parse("acct_1Conn").unwrap();
    let sub = parse_subscription(body, Some(&account)).unwrap();
    assert_eq!(sub.account, Some(account));
    assert_eq!(get(&fake, "/v1/subscriptions/sub_conn", None).await.0, 404);
    let (_, listed) = get(&fake, "/v1/subscriptions?status=all", Some("acct_1Conn")).await;
    assert_eq!(ids(&listed), ["sub_conn"]);
    let (_, platform) = get(&fake, "/v1/subscriptions?status=all", None).await;
    assert_eq!(ids(&platform), ["sub_platform"]);
    assert_eq!(fake.count_on(Some("acct_1Conn"), SUBSCRIPTION_LIST), 1);
}

#[tokio::test]
async fn subscription_and_invoice_events_name_their_subscription() {
    let fake = StripeFake::start().await;
    let sub = subscription("sub_ev", "canceled", 1_000);
    fake.push_event(
        None,
        subscription_event("evt_1", "customer.subscription.deleted", &sub, 60),
    );
    fake.push_event(None, subscription_event("evt_2", "invoice.paid", &sub, 30));
    let (status, page) = get(&fake, "/v1/events?limit=10", None).await;
    assert_eq!(status, 200);
    let data = page["data"].as_array().unwrap();
    assert_eq!(data[0]["type"], "invoice.paid", "newest first");
    let named = stripe_reconciler::stripe::invoice_subscription(&data[0]["data"]["object"]);
    assert_eq!(named.unwrap().as_str(), "sub_ev");
    let deleted = parse_subscription(data[1]["data"]["object"].clone(), None).unwrap();
    assert_eq!(deleted.id.as_str(), "sub_ev");
    assert_eq!(deleted.facts.status, SubscriptionStatus::Canceled);
}
