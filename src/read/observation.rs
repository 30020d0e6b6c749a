//! [`Observation`]: one row's outcome of phase 2, and the constants of the
//! wrong-account rule its findings quote.

use chrono::{DateTime, Utc};

use crate::reconcile::{Decision, ExternalStatus, LocalStatus, Verdict};

/// What a `missing_externally` finding says when `RECONCILER_ACCOUNT_COLUMN`
/// is unset: a connected account's PaymentIntent answers 404 without its
/// `Stripe-Account` header (`shared/stripe/FACTS.md`).
pub const CONNECT_HINT: &str = "Stripe has no such PaymentIntent on the platform's account; it could be a connected account's PaymentIntent: set RECONCILER_ACCOUNT_COLUMN to the payments column holding the acct_ id";

/// When this many reads of a batch answered 404 and none found a
/// PaymentIntent, the key may belong to another account or mode (test vs
/// live), or a Connect account header is missing. The gateway then re-reads a
/// PaymentIntent this job verified before: if Stripe no longer knows it, the
/// key is wrong and the run stops as a configuration error after these few
/// reads, instead of recording every payment as `missing_externally`. If it
/// is found, the 404s are genuine findings. With no PaymentIntent verified
/// before (a new install), the batch stops only when every read of it was a
/// 404 (and at least this many).
pub const WRONG_ACCOUNT_NOT_FOUND_READS: usize = 10;

/// One row's outcome of phase 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// `payments.id` (any key type).
    pub payment_id: crate::key::PaymentKey,
    /// `payments.version` as read in phase 1.
    pub version: i64,
    /// `payments.updated_at` as read in phase 1.
    pub updated_at: DateTime<Utc>,
    /// `payments.status` as read in phase 1.
    pub local: LocalStatus,
    /// The row's PaymentIntent id when it is well-formed (repair commands
    /// carry it).
    pub payment_intent: Option<String>,
    /// What to do about it.
    pub decision: Decision,
    /// Stripe's status when Stripe was actually asked and answered; only these
    /// rows get `last_reconciled_at`.
    pub observed: Option<ExternalStatus>,
    /// A request was sent to Stripe for this row.
    pub asked_stripe: bool,
    /// Why the row is UNVERIFIABLE (the last error), for the
    /// `persistently_unverifiable` finding.
    pub error: Option<String>,
    /// The connected account the row's reads went to (`acct_…`, well-formed;
    /// `None`: the platform's own account, or a malformed value never sent).
    pub stripe_account: Option<String>,
    /// The row's account was unreachable (no access, or every read a 404):
    /// UNVERIFIABLE without counting toward the outage rule.
    pub account_unreachable: bool,
    /// The row's Checkout Session id when the row was judged by its session
    /// (no PaymentIntent id); then `payment_intent` is the
    /// session's PaymentIntent, when it has one.
    pub checkout_session: Option<String>,
}

impl Observation {
    /// Demotes a row that changed since phase 1 to IN_FLIGHT: nothing is
    /// written for it, the next cycle looks again.
    pub fn changed_meanwhile(&mut self) {
        self.decision = Decision::plain(Verdict::InFlight);
        self.observed = None;
    }

    /// UNVERIFIABLE after a read was due: Stripe asked and no usable answer,
    /// or the read was not sent because the row's account is unreachable or
    /// malformed (these carry their reason in `error`). Such rows are counted
    /// per cycle toward `persistently_unverifiable`.
    pub fn unverifiable_read(&self) -> bool {
        self.decision.verdict == Verdict::Unverifiable
            && (self.asked_stripe || self.error.is_some())
    }

    pub(crate) fn unreachable(&mut self, reason: String) {
        self.decision = Decision::plain(Verdict::Unverifiable);
        self.observed = None;
        self.error = Some(reason);
        self.account_unreachable = true;
    }
}
