//! Money with no order: a succeeded PaymentIntent no `payments` row points at
//! becomes a `missing_locally` finding (NEEDS_REVIEW, never repaired), named
//! by its PaymentIntent id (`payment_id` NULL).

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use sqlx::PgConnection;

use crate::outcome::RunError;
use crate::reconcile::{orphan_details, FindingKind, PaymentIntentFacts};
use crate::store::findings::{self, NewIntentFinding};
use crate::store::StoreError;
use crate::stripe::{AccountId, GatewayError, PaymentIntentId, StripeGateway};

/// What re-reading a PaymentIntent without a row said.
#[derive(Debug, Clone)]
pub struct OrphanRead {
    /// The PaymentIntent.
    pub payment_intent: PaymentIntentId,
    /// What was learnt.
    pub outcome: OrphanOutcome,
}

/// The outcome of one orphan read.
#[derive(Debug, Clone)]
pub enum OrphanOutcome {
    /// Succeeded (and carries the metadata key, when one is configured): money
    /// with no order.
    MissingLocally(NewIntentFinding),
    /// Stripe answered and it is not an orphan (not succeeded, no metadata
    /// key, or unknown to Stripe).
    NotAnOrphan,
    /// Stripe could not be asked (the last error, shared: the outcome is cloned).
    Unverifiable(Arc<GatewayError>),
}

impl OrphanRead {
    /// Stripe did not answer.
    pub fn unverifiable(&self) -> bool {
        matches!(self.outcome, OrphanOutcome::Unverifiable(_))
    }
}

/// Re-reads each PaymentIntent on `account` (the connected account whose
/// feed named it, sent as `Stripe-Account`; `None`: the platform),
/// `in_flight` at a time under the gateway's shared limiter.
///
/// # Errors
/// [`RunError::StripeRejected`] for a refused key or a wrong base URL.
pub async fn read(
    gateway: &StripeGateway,
    account: Option<&AccountId>,
    intents: &[PaymentIntentId],
    metadata_key: Option<&str>,
    in_flight: u32,
) -> Result<Vec<OrphanRead>, RunError> {
    futures::stream::iter(intents.iter().cloned())
        .map(|pi| async move {
            let outcome = match gateway.payment_intent_on(account, &pi).await {
                Ok(facts) => judge(&pi, &facts, metadata_key, account),
                Err(GatewayError::NotFound { .. }) => OrphanOutcome::NotAnOrphan,
                Err(e) if e.is_rejected() => return Err(RunError::StripeRejected(e)),
                // Stripe did not answer (`Unavailable`), or a revoked account
                // (`AccountUnreachable`): its orphans wait like an unanswered read.
                Err(e) => {
                    tracing::warn!(payment_intent = %pi, error = %e, "PaymentIntent without a row unverifiable");
                    OrphanOutcome::Unverifiable(Arc::new(e))
                }
            };
            Ok(OrphanRead {
                payment_intent: pi,
                outcome,
            })
        })
        .buffer_unordered((in_flight as usize).max(1))
        .try_collect()
        .await
}

/// The outcome for a PaymentIntent Stripe answered for
/// ([`orphan_details`] decides).
fn judge(
    pi: &PaymentIntentId,
    facts: &PaymentIntentFacts,
    metadata_key: Option<&str>,
    account: Option<&AccountId>,
) -> OrphanOutcome {
    match orphan_details(facts, metadata_key) {
        Some(details) => OrphanOutcome::MissingLocally(NewIntentFinding {
            stripe_payment_intent_id: pi.as_str().to_owned(),
            kind: FindingKind::MissingLocally.as_str().into_owned(),
            external_status: Some(facts.status.as_str().to_owned()),
            details: Some(details),
            stripe_account_id: account.map(|a| a.as_str().to_owned()),
        }),
        None => OrphanOutcome::NotAnOrphan,
    }
}

/// What recording the orphans did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recorded {
    /// `missing_locally` findings created.
    pub created: u64,
    /// Findings without a payment resolved (a row appeared, or the
    /// PaymentIntent no longer qualifies).
    pub cleared: u64,
}

/// In the run's write transaction, after the payments' own findings (these
/// findings have no payment to lock first): resolves findings without a
/// payment for PaymentIntents that now have a row (`with_rows`) or that
/// Stripe says are no longer orphans, and records the new ones once per open
/// (PaymentIntent, kind).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn record(
    tx: &mut PgConnection,
    with_rows: &[String],
    reads: &[OrphanRead],
) -> Result<Recorded, StoreError> {
    let mut intents: Vec<&str> = with_rows.iter().map(String::as_str).collect();
    let mut current: Vec<Option<&str>> = vec![None; intents.len()];
    let mut new = Vec::new();
    for r in reads {
        match &r.outcome {
            OrphanOutcome::MissingLocally(f) => {
                intents.push(r.payment_intent.as_str());
                current.push(Some(f.kind.as_str()));
                new.push(f.clone());
            }
            OrphanOutcome::NotAnOrphan => {
                intents.push(r.payment_intent.as_str());
                current.push(None);
            }
            OrphanOutcome::Unverifiable(_) => {}
        }
    }
    let cleared = findings::resolve_stale_for_intents(tx, &intents, &current).await?;
    let created = findings::upsert_open_for_intents(tx, &new).await?;
    Ok(Recorded { created, cleared })
}
