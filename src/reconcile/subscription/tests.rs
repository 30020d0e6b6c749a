//! The table of docs/subscriptions.md, "Finding kinds", row by row, with the
//! precedence, both past-due policies, a word map, a status-less table and
//! multi-item subscriptions.

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::*;
use crate::{FindingKind, Verdict};

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 6, 12, 0, 0)
        .single()
        .unwrap_or_default()
}

fn days(n: i64) -> DateTime<Utc> {
    now() + Duration::days(n)
}

/// A Cashier-like row: status column, ends-at NULL (renews).
fn row(word: &str) -> SubscriptionRow {
    SubscriptionRow {
        status: Some(Some(word.into())),
        ends_at: Some(None),
        ..SubscriptionRow::default()
    }
}

fn stripe(status: &str) -> SubscriptionFacts {
    let mut s = SubscriptionFacts::with_status(SubscriptionStatus::parse(status));
    s.items = vec![SubscriptionItem {
        price: Some("price_pro".into()),
        quantity: Some(3),
        current_period_end: Some(days(20)),
    }];
    s
}

fn ended(status: &str) -> SubscriptionFacts {
    let mut s = stripe(status);
    s.ended_at = Some(days(-3));
    s
}

fn judge_with(
    row: &SubscriptionRow,
    facts: Option<&SubscriptionFacts>,
    words: &SubscriptionWords,
    past_due: PastDueAccess,
) -> SubscriptionJudgement {
    judge_subscription(row, facts, SubscriptionPolicy { words, past_due }, now())
}

fn judge(row: &SubscriptionRow, facts: &SubscriptionFacts) -> SubscriptionJudgement {
    judge_with(
        row,
        Some(facts),
        &SubscriptionWords::default(),
        PastDueAccess::Grant,
    )
}

fn names(j: &SubscriptionJudgement) -> Vec<String> {
    j.kinds().iter().map(|k| k.as_str().into_owned()).collect()
}

#[test]
fn in_sync_rows_have_no_finding() {
    for status in ["active", "trialing", "past_due", "canceled", "unpaid"] {
        let facts = if status == "canceled" {
            ended(status)
        } else {
            stripe(status)
        };
        let j = judge(&row(status), &facts);
        assert_eq!(j.verdict, Verdict::InSync, "{status}: {j:?}");
        assert!(j.findings.is_empty() && j.repair.is_none(), "{status}");
    }
}

#[test]
fn a_missed_cancel_is_the_one_automatic_end_of_access() {
    for terminal in ["canceled", "incomplete_expired"] {
        let j = judge(&row("active"), &ended(terminal));
        assert_eq!(names(&j), ["subscription_missed_cancel"], "{terminal}");
        assert_eq!(j.verdict, Verdict::Repairable);
        assert!(j.findings[0].money_at_risk);
        let repair = j.repair.unwrap();
        assert_eq!(repair.status.as_deref(), Some(terminal));
        assert_eq!(repair.ends_at, Some(Some(days(-3))), "Stripe's ended_at");
        assert_eq!(repair.period_end, None, "the column is not configured");
    }
}

#[test]
fn access_stripe_does_not_pay_for_waits_for_a_person() {
    for status in ["unpaid", "paused", "incomplete"] {
        let j = judge(&row("active"), &stripe(status));
        assert_eq!(
            names(&j),
            ["subscription_access_without_payment"],
            "{status}"
        );
        assert_eq!(j.verdict, Verdict::NeedsReview);
        assert!(j.findings[0].money_at_risk);
        assert_eq!(j.repair, None, "{status}: nothing is written");
    }
}

#[test]
fn past_due_follows_the_policy() {
    let words = SubscriptionWords::default();
    let j = |r: &SubscriptionRow, s: &str, p| judge_with(r, Some(&stripe(s)), &words, p);
    // grant: past_due keeps access on both sides.
    assert_eq!(
        j(&row("past_due"), "past_due", PastDueAccess::Grant).verdict,
        Verdict::InSync
    );
    let g = j(&row("active"), "past_due", PastDueAccess::Grant);
    assert_eq!(names(&g), ["subscription_status_mismatch"]);
    // revoke: an application that still grants is not paid for ...
    let r = j(&row("active"), "past_due", PastDueAccess::Revoke);
    assert_eq!(names(&r), ["subscription_access_without_payment"]);
    assert_eq!((r.verdict, r.repair), (Verdict::NeedsReview, None));
    // ... and a row at past_due denies too: both agree, in sync.
    let both = j(&row("past_due"), "past_due", PastDueAccess::Revoke);
    assert_eq!(both.verdict, Verdict::InSync);
    // Restoring access while Stripe is past_due waits for a person.
    let blocked = j(&row("canceled"), "past_due", PastDueAccess::Grant);
    assert_eq!(names(&blocked), ["subscription_paid_but_blocked"]);
    assert_eq!(
        (blocked.verdict, blocked.repair),
        (Verdict::NeedsReview, None)
    );
    let revoked = j(&row("canceled"), "past_due", PastDueAccess::Revoke);
    assert_eq!(names(&revoked), ["subscription_status_mismatch"]);
}

#[test]
fn a_paying_customer_locked_out_is_restored() {
    for (word, status) in [("canceled", "active"), ("unpaid", "trialing")] {
        let j = judge(&row(word), &stripe(status));
        assert_eq!(names(&j), ["subscription_paid_but_blocked"], "{word}");
        assert_eq!(j.verdict, Verdict::Repairable);
        assert!(!j.findings[0].money_at_risk);
        assert_eq!(j.repair.unwrap().status.as_deref(), Some(status));
    }
    // An ends-at in the past denies too, whatever the word.
    let mut r = row("active");
    r.ends_at = Some(Some(days(-1)));
    let j = judge(&r, &stripe("active"));
    assert_eq!(names(&j), ["subscription_paid_but_blocked"]);
    assert_eq!(j.repair.unwrap().ends_at, Some(None), "renews: NULL");
}

#[test]
fn the_access_kinds_come_first_and_exclude_the_others() {
    // Words differ, the period is stale and a cancel is scheduled, but
    // access disagrees: only the access kind.
    let mut r = row("canceled");
    r.period_end = Some(Some(days(-40)));
    let mut s = stripe("active");
    s.cancel_at = Some(days(20));
    let j = judge(&r, &s);
    assert_eq!(names(&j), ["subscription_paid_but_blocked"]);
    let repair = j.repair.unwrap();
    assert_eq!(repair.period_end, Some(Some(days(20))));
    assert_eq!(repair.ends_at, Some(Some(days(20))));
}

#[test]
fn words_period_and_schedule_when_access_agrees() {
    let j = judge(&row("active"), &stripe("trialing"));
    assert_eq!(names(&j), ["subscription_status_mismatch"]);
    assert_eq!(j.verdict, Verdict::Repairable);

    let mut r = row("active");
    r.period_end = Some(Some(days(-12)));
    let j = judge(&r, &stripe("active"));
    assert_eq!(names(&j), ["subscription_period_stale"]);
    assert_eq!(j.repair.unwrap().period_end, Some(Some(days(20))));
    r.period_end = Some(Some(days(20) - Duration::hours(23)));
    assert_eq!(
        judge(&r, &stripe("active")).verdict,
        Verdict::InSync,
        "within a day"
    );
    r.period_end = Some(None);
    assert_eq!(
        judge(&r, &stripe("active")).verdict,
        Verdict::InSync,
        "NULL is not before"
    );
    let mut r = row("unpaid");
    r.period_end = Some(Some(days(-12)));
    assert_eq!(
        judge(&r, &ended("canceled")).kinds(),
        [&FindingKind::SubscriptionStatusMismatch],
        "only judged while Stripe grants"
    );

    let mut s = stripe("active");
    s.cancel_at_period_end = true;
    s.cancel_at = Some(days(20));
    let j = judge(&row("active"), &s);
    assert_eq!(names(&j), ["subscription_cancel_scheduled"]);
    assert_eq!(j.repair.unwrap().ends_at, Some(Some(days(20))));
    let mut scheduled_here = row("active");
    scheduled_here.ends_at = Some(Some(days(20)));
    assert_eq!(judge(&scheduled_here, &s).verdict, Verdict::InSync);

    // Several at once: one repair resolves them all.
    let mut r = row("active");
    r.period_end = Some(Some(days(-12)));
    let j = judge(&r, &{
        let mut t = s.clone();
        t.status = SubscriptionStatus::Trialing;
        t
    });
    assert_eq!(
        names(&j),
        [
            "subscription_status_mismatch",
            "subscription_period_stale",
            "subscription_cancel_scheduled"
        ]
    );
    let repair = j.repair.unwrap();
    assert_eq!(repair.status.as_deref(), Some("trialing"));
    assert_eq!(repair.period_end, Some(Some(days(20))));
    assert_eq!(repair.ends_at, Some(Some(days(20))));
}

#[test]
fn an_unconfigured_column_is_never_judged() {
    // No ends-at column: a scheduled cancel says nothing; no period column:
    // never stale; no price or quantity column: never compared.
    let r = SubscriptionRow {
        status: Some(Some("active".into())),
        ..SubscriptionRow::default()
    };
    let mut s = stripe("active");
    s.cancel_at = Some(days(2));
    s.items[0].price = Some("price_other".into());
    let j = judge(&r, &s);
    assert_eq!(j.verdict, Verdict::InSync, "{j:?}");
}

#[test]
fn price_and_quantity_are_judged_on_every_row() {
    let mut r = row("active");
    r.price = Some(Some("price_basic".into()));
    r.quantity = Some(Some(5));
    let j = judge(&r, &stripe("active"));
    assert_eq!(
        names(&j),
        [
            "subscription_price_mismatch",
            "subscription_quantity_mismatch"
        ]
    );
    assert_eq!(j.verdict, Verdict::NeedsReview);
    assert!(j.findings.iter().all(|f| f.money_at_risk), "grants more");
    assert_eq!(j.repair, None);
    // Beside an access kind, and a repair for the access kind only.
    let mut r2 = r.clone();
    r2.status = Some(Some("canceled".into()));
    let j = judge(&r2, &stripe("active"));
    assert_eq!(
        names(&j),
        [
            "subscription_paid_but_blocked",
            "subscription_price_mismatch",
            "subscription_quantity_mismatch"
        ]
    );
    assert_eq!(j.verdict, Verdict::NeedsReview);
    assert!(j.repair.is_some(), "the access repair still goes");
    assert!(
        j.findings[1..].iter().all(|f| !f.money_at_risk),
        "no access granted: no money at risk"
    );
    // Fewer seats than billed: a finding, no money at risk.
    let mut fewer = row("active");
    fewer.quantity = Some(Some(1));
    let j = judge(&fewer, &stripe("active"));
    assert_eq!(names(&j), ["subscription_quantity_mismatch"]);
    assert!(!j.findings[0].money_at_risk);
    // Matching values, and NULLs, are quiet.
    let mut same = row("active");
    same.price = Some(Some("price_pro".into()));
    same.quantity = Some(Some(3));
    assert_eq!(judge(&same, &stripe("active")).verdict, Verdict::InSync);
    same.price = Some(None);
    same.quantity = Some(None);
    assert_eq!(judge(&same, &stripe("active")).verdict, Verdict::InSync);
}

#[test]
fn a_multi_item_subscription_matches_any_item_and_that_items_quantity() {
    let mut s = stripe("active");
    s.items.push(SubscriptionItem {
        price: None,
        quantity: Some(10),
        current_period_end: Some(days(5)),
    });
    s.items[1].price = Some("plan_seats".into());
    let mut r = row("active");
    r.price = Some(Some("plan_seats".into()));
    r.quantity = Some(Some(10));
    r.period_end = Some(Some(days(5)));
    assert_eq!(
        judge(&r, &s).verdict,
        Verdict::InSync,
        "the second item, its quantity"
    );
    r.quantity = Some(Some(3));
    assert_eq!(names(&judge(&r, &s)), ["subscription_quantity_mismatch"]);
    // Cashier: NULL price on a multi-item subscription; the quantity has no
    // item to compare with.
    r.price = Some(None);
    r.quantity = Some(Some(99));
    assert_eq!(judge(&r, &s).verdict, Verdict::InSync);
    // The period end is the earliest item's: 5 days, so a row at 5 is fresh.
    assert_eq!(s.period_end(), Some(days(5)));
}

#[test]
fn a_word_map_reads_and_writes_the_applications_words() {
    let words = SubscriptionWords::new(vec![
        (SubscriptionStatus::Active, vec!["active".into()]),
        (SubscriptionStatus::Trialing, vec!["trial".into()]),
        (
            SubscriptionStatus::Canceled,
            vec!["cancelled".into(), "expired".into()],
        ),
    ]);
    let j = |word: &str, s: &SubscriptionFacts| {
        judge_with(&row(word), Some(s), &words, PastDueAccess::Grant)
    };
    assert_eq!(j("trial", &stripe("trialing")).verdict, Verdict::InSync);
    assert_eq!(j("expired", &ended("canceled")).verdict, Verdict::InSync);
    let missed = j("trial", &ended("canceled"));
    assert_eq!(names(&missed), ["subscription_missed_cancel"]);
    assert_eq!(missed.repair.unwrap().status.as_deref(), Some("cancelled"));
    // A word the map does not name: unverifiable, the word in the reason.
    let unknown = j("on_hold", &stripe("active"));
    assert_eq!(unknown.verdict, Verdict::Unverifiable);
    assert!(unknown.findings.is_empty());
    assert!(unknown.unverifiable.unwrap().contains("\"on_hold\""));
    // A Stripe status the map gives no word cannot be written: review.
    let unpaid_word = j("cancelled", &stripe("unpaid"));
    assert_eq!(names(&unpaid_word), ["subscription_status_mismatch"]);
    assert_eq!(unpaid_word.verdict, Verdict::NeedsReview);
    assert_eq!(unpaid_word.repair, None);
    assert!(unpaid_word.findings[0]
        .note
        .as_deref()
        .unwrap()
        .contains("unpaid"));
}

#[test]
fn a_status_less_table_follows_its_end_columns() {
    // A `users` table: period end and ends-at, no status column.
    let user = |period: Option<DateTime<Utc>>, ends: Option<DateTime<Utc>>| SubscriptionRow {
        status: None,
        period_end: Some(period),
        ends_at: Some(ends),
        ..SubscriptionRow::default()
    };
    let fresh = user(Some(days(20)), None);
    assert_eq!(judge(&fresh, &stripe("active")).verdict, Verdict::InSync);
    // Less than a day past its period end: still grants.
    let grace = user(Some(now() - Duration::hours(20)), None);
    let j = judge(&grace, &ended("canceled"));
    assert_eq!(names(&j), ["subscription_missed_cancel"]);
    let repair = j.repair.unwrap();
    assert_eq!(repair.status, None, "no status column, no word");
    assert_eq!(repair.period_end, Some(Some(days(-3))), "ended_at");
    assert_eq!(repair.ends_at, Some(Some(days(-3))));
    // More than a day past: denies; Stripe renewed: locked out.
    let lapsed = user(Some(days(-2)), None);
    let j = judge(&lapsed, &stripe("active"));
    assert_eq!(names(&j), ["subscription_paid_but_blocked"]);
    assert_eq!(j.repair.unwrap().period_end, Some(Some(days(20))));
    assert_eq!(judge(&lapsed, &ended("canceled")).verdict, Verdict::InSync);
    // NULL period end: no paid period, no access.
    assert_eq!(
        judge(&user(None, None), &ended("canceled")).verdict,
        Verdict::InSync
    );
    // An ends-at ahead keeps access; the words are never judged.
    let leaving = user(Some(days(20)), Some(days(20)));
    assert_eq!(
        judge(&leaving, &{
            let mut s = stripe("trialing");
            s.cancel_at = Some(days(20));
            s
        })
        .verdict,
        Verdict::InSync
    );
}

#[test]
fn stripe_missing_unknown_or_null_status() {
    let words = SubscriptionWords::default();
    let missing = judge_with(&row("active"), None, &words, PastDueAccess::Grant);
    assert_eq!(names(&missing), ["subscription_missing_externally"]);
    assert_eq!(missing.verdict, Verdict::NeedsReview);
    assert!(!missing.findings[0].money_at_risk);
    let new = judge(&row("active"), &stripe("on_ice"));
    assert_eq!(new.verdict, Verdict::Unverifiable);
    assert!(new.unverifiable.unwrap().contains("on_ice"));
    let null = SubscriptionRow {
        status: Some(None),
        ..SubscriptionRow::default()
    };
    let j = judge(&null, &stripe("active"));
    assert_eq!(j.verdict, Verdict::Unverifiable);
    assert!(j.unverifiable.unwrap().contains("NULL"));
}

/// Stripe still says `active` while its period ended two days ago (a
/// renewal invoice not yet finalised): writing its period end into a
/// status-less row would not give the row access, so the locked-out
/// customer waits for a person and nothing is written.
#[test]
fn a_repair_that_would_not_restore_access_waits_for_a_person() {
    let lapsed = SubscriptionRow {
        status: None,
        period_end: Some(Some(days(-5))),
        ends_at: Some(None),
        ..SubscriptionRow::default()
    };
    let mut late_renewal = stripe("active");
    late_renewal.items[0].current_period_end = Some(days(-2));
    let j = judge(&lapsed, &late_renewal);
    assert_eq!(names(&j), ["subscription_paid_but_blocked"]);
    assert_eq!(j.verdict, Verdict::NeedsReview, "{j:?}");
    assert_eq!(j.findings[0].verdict, Verdict::NeedsReview);
    assert!(j.findings[0].note.is_some(), "the note says why: {j:?}");
    assert_eq!(j.repair, None, "nothing is written");
}

/// The instants where access ends, exactly: an ends-at equal to the run's
/// clock has ended; a status-less row's period end exactly one day
/// (`PERIOD_SLACK`) behind no longer grants; a period end exactly one day
/// behind Stripe's is not yet stale.
#[test]
fn access_ends_at_the_instant_the_rules_name() {
    let mut ending_now = row("active");
    ending_now.ends_at = Some(Some(now()));
    let j = judge(&ending_now, &stripe("active"));
    assert_eq!(names(&j), ["subscription_paid_but_blocked"], "{j:?}");

    let at_slack = SubscriptionRow {
        status: None,
        period_end: Some(Some(now() - PERIOD_SLACK)),
        ends_at: Some(None),
        ..SubscriptionRow::default()
    };
    let j = judge(&at_slack, &stripe("active"));
    assert_eq!(names(&j), ["subscription_paid_but_blocked"], "{j:?}");

    let mut a_day_behind = row("active");
    a_day_behind.period_end = Some(Some(days(20) - PERIOD_SLACK));
    let j = judge(&a_day_behind, &stripe("active"));
    assert_eq!(j.verdict, Verdict::InSync, "{j:?}");
    a_day_behind.period_end = Some(Some(days(20) - PERIOD_SLACK - Duration::seconds(1)));
    let j = judge(&a_day_behind, &stripe("active"));
    assert_eq!(names(&j), ["subscription_period_stale"], "{j:?}");
}

#[test]
fn the_past_due_policy_reads_both_words_and_nothing_else() {
    assert_eq!(PastDueAccess::parse("grant"), Some(PastDueAccess::Grant));
    assert_eq!(
        PastDueAccess::parse(" revoke "),
        Some(PastDueAccess::Revoke)
    );
    for other in ["Grant", "allow", ""] {
        assert_eq!(PastDueAccess::parse(other), None, "{other}");
    }
    for p in [PastDueAccess::Grant, PastDueAccess::Revoke] {
        assert_eq!(PastDueAccess::parse(p.as_str()), Some(p));
    }
}
