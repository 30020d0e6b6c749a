//! The outage rule (docs/scan.md, "Guards"): when Stripe is down for most of a
//! batch, the batch is abandoned without a write and the next run retries its
//! rows, instead of leaving them UNVERIFIABLE for a whole cycle; a probe tells
//! an outage from a few rows that always fail.

use super::detect::Observed;
use crate::outcome::RunError;
use crate::reconcile::Verdict;
use crate::stripe::StripeGateway;

/// A batch aborts instead of skipping rows as UNVERIFIABLE when more than half
/// of at least this many Stripe reads failed: Stripe is down, and the next run
/// should retry these rows rather than leave them unchecked for a whole cycle.
pub const STRIPE_DOWN_MIN_READS: usize = 5;

/// The outage rule for one batch's reads: when more than half of at least [`STRIPE_DOWN_MIN_READS`] reads failed,
/// asks Stripe whether it answers at all ([`StripeGateway::probe`]) before
/// abandoning the batch: if it does, the failures belong to those rows (one
/// PaymentIntent that always answers 500, a body Stripe cannot give whole):
/// they stay UNVERIFIABLE and the cursor moves on, so a few bad rows at the
/// head of a small batch can never stall the scan.
pub(crate) async fn check_stripe_reachable(
    gateway: &StripeGateway,
    observed: &Observed,
) -> Result<(), RunError> {
    let observations = &observed.observations;
    // A list page that failed after retries is a failed read too. A
    // connected account the platform cannot read says nothing about
    // Stripe's health: its rows count neither way (docs/connect.md).
    let reads = || {
        observations
            .iter()
            .filter(|o| o.asked_stripe && !o.account_unreachable)
    };
    let asked = reads().count() + observed.failed_pages;
    let failed = reads()
        .filter(|o| o.decision.verdict == Verdict::Unverifiable)
        .count()
        + observed.failed_pages;
    stripe_reachable(gateway, asked, failed).await
}

/// The outage rule of a batch, for any set of reads: `failed` of `asked`
/// reads ended UNVERIFIABLE. Ok when few failed, or when Stripe answers a
/// probe (the failures belong to those reads).
///
/// # Errors
/// [`RunError::StripeDown`] when Stripe does not answer the probe either;
/// [`RunError::StripeRejected`] when the probe is refused.
pub async fn stripe_reachable(
    gateway: &StripeGateway,
    asked: usize,
    failed: usize,
) -> Result<(), RunError> {
    if asked < STRIPE_DOWN_MIN_READS || failed * 2 <= asked {
        return Ok(());
    }
    match gateway.probe().await {
        Ok(()) => {
            tracing::warn!(
                failed,
                asked,
                "most reads of the batch failed but Stripe answers: those rows are UNVERIFIABLE and the cursor moves on"
            );
            Ok(())
        }
        Err(e) if e.is_rejected() => Err(RunError::StripeRejected(e)),
        Err(e) => {
            tracing::error!(error = %e, "Stripe does not answer a probe either");
            Err(RunError::StripeDown { failed, asked })
        }
    }
}
