//! Checkout Sessions (docs/checkout-sessions.md): the facts of a session as the gateway read
//! it, and its judgement against a `payments` row that has no PaymentIntent
//! id yet. PURE: no I/O.
//!
//! A payment-mode session creates its PaymentIntent only when the customer
//! submits it (API version 2022-08-01 and later; `shared/stripe/FACTS.md`).
//! Once the session has one, the row is judged by that PaymentIntent and its
//! latest charge with every rule of [`classify`]: refunds, disputes,
//! amounts, currencies, aging. Before that, the session alone says where the
//! payment is (open: in flight; expired: cancelled).

use chrono::{DateTime, Utc};
use serde_json::json;

use super::classify::{classify, Rules};
use super::decision::{classify_status, Decision, Verdict};
use super::facts::{LocalPayment, PaymentIntentFacts};
use super::kind::FindingKind;
use super::status::{ExternalStatus, LocalStatus};

/// `mode` of a Checkout Session (Stripe API reference, "The Checkout
/// Session object").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionMode {
    /// `payment`: one payment, through a PaymentIntent.
    Payment,
    /// `setup`: saves a payment method (a SetupIntent); no money moves.
    Setup,
    /// `subscription`: the money moves through the subscription's invoices.
    Subscription,
    /// Any other word Stripe may add.
    Other(String),
}

impl SessionMode {
    /// Parses Stripe's word; never fails.
    pub fn parse(word: &str) -> Self {
        match word {
            "payment" => Self::Payment,
            "setup" => Self::Setup,
            "subscription" => Self::Subscription,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Stripe's word.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Payment => "payment",
            Self::Setup => "setup",
            Self::Subscription => "subscription",
            Self::Other(s) => s,
        }
    }
}

/// `status` of a Checkout Session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionStatus {
    /// `open`: the customer may still pay.
    Open,
    /// `complete`: the customer submitted it (the money may still be on its
    /// way: see [`SessionPaymentStatus`]).
    Complete,
    /// `expired`: it can no longer be paid.
    Expired,
    /// Any other word Stripe may add.
    Other(String),
}

impl SessionStatus {
    /// Parses Stripe's word; never fails.
    pub fn parse(word: &str) -> Self {
        match word {
            "open" => Self::Open,
            "complete" => Self::Complete,
            "expired" => Self::Expired,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Stripe's word.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Open => "open",
            Self::Complete => "complete",
            Self::Expired => "expired",
            Self::Other(s) => s,
        }
    }
}

/// `payment_status` of a Checkout Session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionPaymentStatus {
    /// `paid`: the funds are available.
    Paid,
    /// `unpaid`: not yet (a delayed method such as SEPA or ACH keeps a
    /// complete session `unpaid` while its PaymentIntent is `processing`).
    Unpaid,
    /// `no_payment_required`: nothing to pay (a 100% discount, a trial).
    NoPaymentRequired,
    /// Any other word Stripe may add.
    Other(String),
}

impl SessionPaymentStatus {
    /// Parses Stripe's word; never fails.
    pub fn parse(word: &str) -> Self {
        match word {
            "paid" => Self::Paid,
            "unpaid" => Self::Unpaid,
            "no_payment_required" => Self::NoPaymentRequired,
            other => Self::Other(other.to_owned()),
        }
    }

    /// Stripe's word.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Paid => "paid",
            Self::Unpaid => "unpaid",
            Self::NoPaymentRequired => "no_payment_required",
            Self::Other(s) => s,
        }
    }
}

/// A session's `payment_intent`, in the shapes the response can have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SessionPaymentIntent {
    /// `null`: no PaymentIntent yet (open or expired without an attempt).
    None,
    /// A bare id: the PaymentIntent was not expanded.
    NotExpanded(String),
    /// The PaymentIntent object (`expand[]=payment_intent.latest_charge`).
    Expanded {
        /// Its id (a well-formed `pi_` id).
        id: String,
        /// Its facts, the latest charge included.
        facts: Box<PaymentIntentFacts>,
    },
}

impl SessionPaymentIntent {
    /// The PaymentIntent id, when the session has one.
    pub fn id(&self) -> Option<&str> {
        match self {
            Self::None => None,
            Self::NotExpanded(id) | Self::Expanded { id, .. } => Some(id),
        }
    }
}

/// The parts of a Checkout Session the reconciler uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckoutSessionFacts {
    /// `mode`.
    pub mode: SessionMode,
    /// `status`.
    pub status: SessionStatus,
    /// `payment_status`.
    pub payment_status: SessionPaymentStatus,
    /// `expires_at` (Stripe's clock); `None` when absent.
    pub expires_at: Option<DateTime<Utc>>,
    /// `payment_intent`.
    pub payment_intent: SessionPaymentIntent,
}

/// A session's judgement: the decision, and what to record beside it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionJudgement {
    /// What to do about the row.
    pub decision: Decision,
    /// The status Stripe showed: the PaymentIntent's when the session has
    /// one, else the session's own `status` word (`open`, `expired`, ...);
    /// `None` for an UNVERIFIABLE decision.
    pub observed: Option<ExternalStatus>,
    /// The session's PaymentIntent id, when it has one (a repair command
    /// tells the canonical writer to fill it in).
    pub payment_intent: Option<String>,
}

/// Judges a row with no PaymentIntent id by its Checkout Session
/// (`docs/checkout-sessions.md` has the table):
///
/// - not `payment` mode: NEEDS_REVIEW `invalid_checkout_session_id`, with the
///   mode in `details.reason` (no PaymentIntent to compare; never a guess);
/// - a local `pending` row of an `open` session: IN_FLIGHT (the customer may
///   still pay, whatever a failed attempt left on its PaymentIntent);
/// - with an expanded PaymentIntent: [`classify`] of it, every money and
///   aging rule included (`complete` + `paid` is `succeeded`:
///   `missed_success` for a `pending` row; `complete` + `unpaid` is
///   `processing`: in flight, `stuck_processing` after
///   `RECONCILER_PROCESSING_MAX_SECONDS`, `paid_locally_not_externally` for a
///   `paid` row); an `expired` session whose PaymentIntent never took the
///   money is judged as a `canceled` one;
/// - without a PaymentIntent: `expired` as a `canceled` PaymentIntent
///   (`missed_cancel` for a `pending` row), `open` as one waiting for a
///   payment method, `complete` with `no_payment_required` in sync with
///   `paid` only;
/// - a PaymentIntent that was not expanded, or `complete` and `paid` with
///   none: UNVERIFIABLE with the reason.
pub fn classify_session(
    local: &LocalPayment,
    session: &CheckoutSessionFacts,
    rules: &Rules,
    now: DateTime<Utc>,
) -> SessionJudgement {
    let payment_intent = session.payment_intent.id().map(str::to_owned);
    let judged = |decision: Decision, observed: Option<ExternalStatus>| SessionJudgement {
        observed: observed.filter(|_| decision.verdict != Verdict::Unverifiable),
        decision,
        payment_intent: payment_intent.clone(),
    };
    if session.mode != SessionMode::Payment {
        let mode = session.mode.as_str();
        let reason = format!(
            "the Checkout Session is in {mode} mode: it has no PaymentIntent to compare with the payment"
        );
        let decision = Decision::review_with(
            FindingKind::InvalidCheckoutSessionId,
            json!({ "reason": reason, "mode": mode }),
        );
        return judged(decision, None);
    }
    let session_word = ExternalStatus::parse(session.status.as_str());
    match &session.payment_intent {
        SessionPaymentIntent::Expanded { facts, .. } => {
            let decision = with_payment_intent(local, session, facts, rules, now);
            judged(decision, Some(facts.status.clone()))
        }
        SessionPaymentIntent::NotExpanded(_) => judged(
            Decision::unverifiable(
                "the Checkout Session's PaymentIntent was not expanded: its money cannot be checked",
            ),
            None,
        ),
        SessionPaymentIntent::None => judged(without_payment_intent(local, session), Some(session_word)),
    }
}

/// A session with its PaymentIntent: the PaymentIntent's classification,
/// after the session's own word on `open` and `expired`.
fn with_payment_intent(
    local: &LocalPayment,
    session: &CheckoutSessionFacts,
    pi: &PaymentIntentFacts,
    rules: &Rules,
    now: DateTime<Utc>,
) -> Decision {
    use ExternalStatus as E;
    match session.status {
        SessionStatus::Open if local.status == LocalStatus::Pending => {
            return Decision::plain(Verdict::InFlight)
        }
        // Expiry cancels the session's PaymentIntent; one still waiting for
        // the customer can no longer be paid through this session.
        SessionStatus::Expired
            if matches!(
                pi.status,
                E::RequiresPaymentMethod | E::RequiresConfirmation | E::RequiresAction
            ) =>
        {
            return classify_status(&local.status, &E::Canceled)
        }
        _ => {}
    }
    // The row holds no PaymentIntent id, so it shares none.
    let local = LocalPayment {
        shares_payment_intent: false,
        ..local.clone()
    };
    classify(&local, pi, rules, now)
}

/// A session without a PaymentIntent: its status alone.
fn without_payment_intent(local: &LocalPayment, session: &CheckoutSessionFacts) -> Decision {
    use ExternalStatus as E;
    match (&session.status, &session.payment_status) {
        (SessionStatus::Open, _) if local.status == LocalStatus::Pending => {
            Decision::plain(Verdict::InFlight)
        }
        (SessionStatus::Open, _) => classify_status(&local.status, &E::RequiresPaymentMethod),
        (SessionStatus::Expired, _) => classify_status(&local.status, &E::Canceled),
        (SessionStatus::Complete, SessionPaymentStatus::NoPaymentRequired)
            if local.status == LocalStatus::Paid =>
        {
            Decision::plain(Verdict::InSync)
        }
        (SessionStatus::Complete, SessionPaymentStatus::Paid | SessionPaymentStatus::Unpaid) => {
            Decision::unverifiable(
                "the Checkout Session is complete but Stripe showed no PaymentIntent: its money cannot be checked",
            )
        }
        (status, payment_status) => Decision::review_with(
            FindingKind::Unexpected {
                local: local.status.as_str().to_owned(),
                external: status.as_str().to_owned(),
            },
            json!({ "payment_status": payment_status.as_str() }),
        ),
    }
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;
    use crate::{Charge, ChargeFacts, RepairCommand};

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2001, 3, 4, 12, 0, 0).unwrap()
    }

    fn rules() -> Rules {
        Rules {
            processing_max_seconds: 2_000,
            ..Rules::default()
        }
    }

    /// A PaymentIntent created `age` seconds before `now()`; a succeeded
    /// one has its charge, captured whole, nothing refunded or disputed.
    fn pi(status: &str, age: i64) -> PaymentIntentFacts {
        let mut facts = PaymentIntentFacts {
            amount: Some(1099),
            currency: Some("eur".into()),
            created: Some(now() - Duration::seconds(age)),
            ..PaymentIntentFacts::with_status(ExternalStatus::parse(status))
        };
        if status == "succeeded" {
            facts.charge = ChargeFacts::Known(Charge {
                amount: Some(1099),
                amount_captured: Some(1099),
                amount_refunded: Some(0),
                refunded: Some(false),
                disputed: Some(false),
            });
        }
        facts
    }

    fn session(status: &str, paid: &str, pi: Option<PaymentIntentFacts>) -> CheckoutSessionFacts {
        CheckoutSessionFacts {
            mode: SessionMode::Payment,
            status: SessionStatus::parse(status),
            payment_status: SessionPaymentStatus::parse(paid),
            expires_at: Some(now() + Duration::hours(23)),
            payment_intent: match pi {
                Some(facts) => SessionPaymentIntent::Expanded {
                    id: "pi_S".into(),
                    facts: Box::new(facts),
                },
                None => SessionPaymentIntent::None,
            },
        }
    }

    fn judge(local: &str, s: &CheckoutSessionFacts) -> SessionJudgement {
        let local = LocalPayment::with_status(LocalStatus::parse(local));
        classify_session(&local, s, &rules(), now())
    }

    fn kind(j: &SessionJudgement) -> Option<String> {
        j.decision.kind.as_ref().map(|k| k.as_str().into_owned())
    }

    #[test]
    fn every_row_of_the_session_table() {
        type Case = (
            &'static str,
            CheckoutSessionFacts,
            Verdict,
            Option<&'static str>,
            Option<RepairCommand>,
        );
        let cases: Vec<Case> = vec![
            // The missed checkout.session.completed.
            (
                "pending",
                session("complete", "paid", Some(pi("succeeded", 60))),
                Verdict::Repairable,
                Some("missed_success"),
                Some(RepairCommand::ApplyPaymentSucceeded),
            ),
            (
                "paid",
                session("complete", "paid", Some(pi("succeeded", 60))),
                Verdict::InSync,
                None,
                None,
            ),
            (
                "pending",
                session("expired", "unpaid", None),
                Verdict::Repairable,
                Some("missed_cancel"),
                Some(RepairCommand::ApplyPaymentCanceled),
            ),
            (
                "pending",
                session("expired", "unpaid", Some(pi("requires_payment_method", 60))),
                Verdict::Repairable,
                Some("missed_cancel"),
                Some(RepairCommand::ApplyPaymentCanceled),
            ),
            (
                "failed",
                session("expired", "unpaid", None),
                Verdict::InSync,
                None,
                None,
            ),
            // A delayed method: complete, unpaid, PaymentIntent processing.
            (
                "pending",
                session("complete", "unpaid", Some(pi("processing", 60))),
                Verdict::InFlight,
                None,
                None,
            ),
            (
                "pending",
                session("complete", "unpaid", Some(pi("processing", 5_000))),
                Verdict::NeedsReview,
                Some("stuck_processing"),
                None,
            ),
            (
                "paid",
                session("complete", "unpaid", Some(pi("processing", 60))),
                Verdict::NeedsReview,
                Some("paid_locally_not_externally"),
                None,
            ),
            (
                "pending",
                session("open", "unpaid", None),
                Verdict::InFlight,
                None,
                None,
            ),
            (
                "pending",
                session("open", "unpaid", Some(pi("requires_payment_method", 60))),
                Verdict::InFlight,
                None,
                None,
            ),
            (
                "paid",
                session("open", "unpaid", None),
                Verdict::NeedsReview,
                Some("paid_locally_not_externally"),
                None,
            ),
            (
                "paid",
                session("complete", "no_payment_required", None),
                Verdict::InSync,
                None,
                None,
            ),
            (
                "pending",
                session("complete", "no_payment_required", None),
                Verdict::NeedsReview,
                Some("unexpected:pending->complete"),
                None,
            ),
            (
                "pending",
                session("complete", "paid", None),
                Verdict::Unverifiable,
                None,
                None,
            ),
        ];
        for (local, s, verdict, k, command) in cases {
            let j = judge(local, &s);
            let case = format!("{local} vs {s:?}");
            assert_eq!(j.decision.verdict, verdict, "{case}");
            assert_eq!(kind(&j).as_deref(), k, "{case}");
            assert_eq!(j.decision.command, command, "{case}");
            assert_eq!(
                j.payment_intent.is_some(),
                s.payment_intent.id().is_some(),
                "{case}"
            );
        }
    }

    #[test]
    fn the_money_rules_apply_to_the_sessions_payment_intent() {
        let mut refunded = pi("succeeded", 60);
        if let ChargeFacts::Known(c) = &mut refunded.charge {
            c.amount_refunded = Some(1099);
            c.refunded = Some(true);
        }
        let j = judge("pending", &session("complete", "paid", Some(refunded)));
        assert_eq!(kind(&j).as_deref(), Some("refunded"));
        assert_eq!(j.decision.command, None);
        let mut local = LocalPayment::with_status(LocalStatus::Pending);
        local.currency = Some("usd".into());
        let j = classify_session(
            &local,
            &session("complete", "paid", Some(pi("succeeded", 60))),
            &rules(),
            now(),
        );
        assert_eq!(kind(&j).as_deref(), Some("currency_mismatch"));
        // The charge not expanded: the repair waits for a read that proves the money.
        let mut unexpanded = pi("succeeded", 60);
        unexpanded.charge = ChargeFacts::NotExpanded;
        let j = judge("pending", &session("complete", "paid", Some(unexpanded)));
        assert_eq!(j.decision.verdict, Verdict::Unverifiable);
        assert_eq!(j.decision.command, None);
        assert_eq!(j.observed, None);
    }

    #[test]
    fn sessions_that_are_no_payment_or_not_expanded_are_never_guessed() {
        for mode in ["setup", "subscription"] {
            let mut s = session("complete", "no_payment_required", None);
            s.mode = SessionMode::parse(mode);
            let j = judge("pending", &s);
            assert_eq!(
                kind(&j).as_deref(),
                Some("invalid_checkout_session_id"),
                "{mode}"
            );
            let reason = j.decision.details.as_ref().unwrap()["reason"]
                .as_str()
                .unwrap();
            assert!(reason.contains(mode), "{reason}");
        }
        let mut s = session("complete", "paid", None);
        s.payment_intent = SessionPaymentIntent::NotExpanded("pi_S".into());
        let j = judge("pending", &s);
        assert_eq!(j.decision.verdict, Verdict::Unverifiable);
        assert_eq!(j.payment_intent.as_deref(), Some("pi_S"));
    }

    #[test]
    fn the_observed_status_is_the_payment_intents_or_the_sessions() {
        let j = judge(
            "pending",
            &session("complete", "paid", Some(pi("succeeded", 60))),
        );
        assert_eq!(j.observed, Some(ExternalStatus::Succeeded));
        let j = judge("pending", &session("expired", "unpaid", None));
        assert_eq!(
            j.observed.as_ref().map(ExternalStatus::as_str),
            Some("expired")
        );
    }

    #[test]
    fn a_session_payment_status_keeps_stripes_word() {
        for word in ["paid", "unpaid", "no_payment_required", "brand_new_word"] {
            assert_eq!(SessionPaymentStatus::parse(word).as_str(), word);
        }
    }

    /// An open session waits for the customer only for a row still
    /// `pending`: a row `paid` before the customer paid is drift.
    #[test]
    fn an_open_session_is_in_flight_only_for_a_pending_row() {
        let open = session("open", "unpaid", Some(pi("requires_payment_method", 60)));
        assert_eq!(judge("pending", &open).decision.verdict, Verdict::InFlight);
        let j = judge("paid", &open);
        assert_eq!(j.decision.verdict, Verdict::NeedsReview);
        assert_eq!(kind(&j).as_deref(), Some("paid_locally_not_externally"));
    }

    /// Expiry cancels only a PaymentIntent still waiting for the customer;
    /// one that moved on (succeeded, processing) is judged by its own word.
    #[test]
    fn an_expired_session_defers_to_a_payment_intent_that_moved_on() {
        let j = judge(
            "pending",
            &session("expired", "unpaid", Some(pi("succeeded", 60))),
        );
        assert_eq!(kind(&j).as_deref(), Some("missed_success"));
        let j = judge(
            "pending",
            &session("expired", "unpaid", Some(pi("processing", 60))),
        );
        assert_eq!(j.decision.verdict, Verdict::InFlight);
        for waiting in [
            "requires_payment_method",
            "requires_confirmation",
            "requires_action",
        ] {
            let j = judge(
                "pending",
                &session("expired", "unpaid", Some(pi(waiting, 60))),
            );
            assert_eq!(kind(&j).as_deref(), Some("missed_cancel"), "{waiting}");
        }
    }

    /// A row found by its Checkout Session holds no PaymentIntent id, so it
    /// shares none: whatever the scan said of duplicates, the session's
    /// PaymentIntent decides.
    #[test]
    fn a_session_row_never_counts_as_sharing_its_payment_intent() {
        let local = LocalPayment {
            shares_payment_intent: true,
            ..LocalPayment::with_status(LocalStatus::Pending)
        };
        let s = session("complete", "paid", Some(pi("succeeded", 60)));
        let j = classify_session(&local, &s, &rules(), now());
        assert_eq!(kind(&j).as_deref(), Some("missed_success"), "{j:?}");
        assert_eq!(
            j.decision.command,
            Some(RepairCommand::ApplyPaymentSucceeded)
        );
    }
}
