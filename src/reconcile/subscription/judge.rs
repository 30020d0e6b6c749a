//! [`judge_subscription`]: one row of the application's subscriptions table
//! against Stripe's subscription (docs/subscriptions.md, "Finding kinds").
//! The three access kinds exclude each other and come first; the words,
//! the period and the schedule are judged only when both sides agree on
//! access; price and quantity on every row; a kind whose column is not
//! configured is never judged.

use chrono::{DateTime, Duration, Utc};

use super::facts::{Column, SubscriptionFacts, SubscriptionRow};
use super::status::{PastDueAccess, SubscriptionStatus};
use super::words::SubscriptionWords;
use crate::{FindingKind, Verdict};

/// How far a period end may lag: a status-less row keeps access until its
/// period end is a day past, and a period end more than a day before
/// Stripe's is stale (seconds: 86,400).
pub const PERIOD_SLACK: Duration = Duration::days(1);

/// The settings classification reads: the status words and the dunning
/// policy (`RECONCILER_SUBSCRIPTION_STATUSES`, `RECONCILER_PAST_DUE_ACCESS`).
#[derive(Debug, Clone, Copy)]
pub struct SubscriptionPolicy<'a> {
    /// The application's words for Stripe's statuses.
    pub words: &'a SubscriptionWords,
    /// Whether `past_due` keeps access.
    pub past_due: PastDueAccess,
}

/// One finding about a subscription row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionFinding {
    /// One of the `subscription_*` kinds.
    pub kind: FindingKind,
    /// [`Verdict::Repairable`] or [`Verdict::NeedsReview`].
    pub verdict: Verdict,
    /// Whether this row's money is at risk: the application grants what
    /// Stripe does not bill (docs/subscriptions.md, "Money at risk").
    pub money_at_risk: bool,
    /// Why a kind that is repairable by the table is not, when it is not.
    pub note: Option<String>,
}

/// Stripe's values for the configured columns: what one
/// `ApplySubscriptionState` command writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionState {
    /// The first word of Stripe's status; `None` when the table has no
    /// status column.
    pub status: Option<String>,
    /// Stripe's period end (`ended_at` for an ended subscription), when
    /// the period end column is configured.
    pub period_end: Column<DateTime<Utc>>,
    /// Stripe's ends-at, when the ends-at column is configured.
    pub ends_at: Column<DateTime<Utc>>,
}

/// The outcome for one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubscriptionJudgement {
    /// The row's verdict: the worst of its findings, [`Verdict::InSync`]
    /// without any, [`Verdict::Unverifiable`] with [`Self::unverifiable`].
    pub verdict: Verdict,
    /// The row's findings, access kind first.
    pub findings: Vec<SubscriptionFinding>,
    /// The one repair of the row, resolving every repairable finding;
    /// `None` when none is repairable.
    pub repair: Option<SubscriptionState>,
    /// Why the row could not be judged (a word the map does not name, a
    /// status Stripe added).
    pub unverifiable: Option<String>,
}

impl SubscriptionJudgement {
    fn unverifiable(reason: String) -> Self {
        SubscriptionJudgement {
            verdict: Verdict::Unverifiable,
            findings: Vec::new(),
            repair: None,
            unverifiable: Some(reason),
        }
    }

    fn of(findings: Vec<SubscriptionFinding>, repair: Option<SubscriptionState>) -> Self {
        let verdict = findings
            .iter()
            .map(|f| f.verdict)
            .max()
            .unwrap_or(Verdict::InSync);
        SubscriptionJudgement {
            verdict,
            findings,
            repair,
            unverifiable: None,
        }
    }

    /// The kinds found, in order.
    pub fn kinds(&self) -> Vec<&FindingKind> {
        self.findings.iter().map(|f| &f.kind).collect()
    }
}

/// What the application's row says about access.
struct AppAccess {
    grants: bool,
    /// The Stripe status its word stands for; `None` without a status column.
    status: Option<SubscriptionStatus>,
}

fn finding(kind: FindingKind, verdict: Verdict, money_at_risk: bool) -> SubscriptionFinding {
    SubscriptionFinding {
        kind,
        verdict,
        money_at_risk,
        note: None,
    }
}

/// Judges one row against Stripe at `now` (the run's clock). `stripe` is
/// `None` when Stripe answered `resource_missing` for the row's id.
pub fn judge_subscription(
    row: &SubscriptionRow,
    stripe: Option<&SubscriptionFacts>,
    policy: SubscriptionPolicy<'_>,
    now: DateTime<Utc>,
) -> SubscriptionJudgement {
    let Some(stripe) = stripe else {
        let missing = finding(
            FindingKind::SubscriptionMissingExternally,
            Verdict::NeedsReview,
            false,
        );
        return SubscriptionJudgement::of(vec![missing], None);
    };
    let Some(stripe_grants) = stripe.status.grants(policy.past_due) else {
        return SubscriptionJudgement::unverifiable(format!(
            "Stripe's subscription status {:?} is not one this version knows",
            stripe.status.as_str()
        ));
    };
    let app = match app_access(row, policy, now) {
        Ok(app) => app,
        Err(reason) => return SubscriptionJudgement::unverifiable(reason),
    };
    let mut findings = match access_finding(&app, stripe, stripe_grants) {
        Some(access) => vec![access],
        None => agreement_findings(row, &app, stripe, stripe_grants),
    };
    findings.extend(billing_findings(row, &app, stripe));
    let repair = repair_state(row, stripe, policy, &mut findings)
        .filter(|state| keeps_access(row, state, (policy, now), stripe_grants, &mut findings));
    SubscriptionJudgement::of(findings, repair)
}

/// The application's access: with a status column, its word's status
/// grants and its ends-at (if configured) is NULL or ahead; without one,
/// its ends-at is NULL or ahead and its period end (if configured) is less
/// than a day past.
fn app_access(
    row: &SubscriptionRow,
    policy: SubscriptionPolicy<'_>,
    now: DateTime<Utc>,
) -> Result<AppAccess, String> {
    let ends_open = match row.ends_at {
        None | Some(None) => true,
        Some(Some(ends)) => ends > now,
    };
    let Some(word) = &row.status else {
        let period_open = match row.period_end {
            None => true,
            Some(None) => false,
            Some(Some(end)) => end > now - PERIOD_SLACK,
        };
        return Ok(AppAccess {
            grants: ends_open && period_open,
            status: None,
        });
    };
    let Some(word) = word else {
        return Err("the row's status is NULL".to_owned());
    };
    let status = policy.words.status_of(word).ok_or_else(|| {
        format!("the row's status {word:?} is not a word of RECONCILER_SUBSCRIPTION_STATUSES")
    })?;
    Ok(AppAccess {
        grants: status.grants(policy.past_due) == Some(true) && ends_open,
        status: Some(status.clone()),
    })
}

/// The access kind, when the two sides disagree on access.
fn access_finding(
    app: &AppAccess,
    stripe: &SubscriptionFacts,
    stripe_grants: bool,
) -> Option<SubscriptionFinding> {
    use SubscriptionStatus as S;
    match (app.grants, stripe_grants) {
        (true, false) if stripe.status.is_terminal() => Some(finding(
            FindingKind::SubscriptionMissedCancel,
            Verdict::Repairable,
            true,
        )),
        (true, false) => Some(finding(
            FindingKind::SubscriptionAccessWithoutPayment,
            Verdict::NeedsReview,
            true,
        )),
        (false, true) => {
            let verdict = match stripe.status {
                S::Active | S::Trialing => Verdict::Repairable,
                _ => Verdict::NeedsReview,
            };
            Some(finding(
                FindingKind::SubscriptionPaidButBlocked,
                verdict,
                false,
            ))
        }
        _ => None,
    }
}

/// The words, the period and the schedule, when access agrees.
fn agreement_findings(
    row: &SubscriptionRow,
    app: &AppAccess,
    stripe: &SubscriptionFacts,
    stripe_grants: bool,
) -> Vec<SubscriptionFinding> {
    let mut out = Vec::new();
    if app.status.as_ref().is_some_and(|s| *s != stripe.status) {
        out.push(finding(
            FindingKind::SubscriptionStatusMismatch,
            Verdict::Repairable,
            false,
        ));
    }
    if let (true, Some(Some(local)), Some(theirs)) =
        (stripe_grants, row.period_end, stripe.period_end())
    {
        if local < theirs - PERIOD_SLACK {
            out.push(finding(
                FindingKind::SubscriptionPeriodStale,
                Verdict::Repairable,
                false,
            ));
        }
    }
    let scheduled = stripe.ended_at.is_none() && stripe.ends_at().is_some();
    if scheduled && row.ends_at == Some(None) {
        out.push(finding(
            FindingKind::SubscriptionCancelScheduled,
            Verdict::Repairable,
            false,
        ));
    }
    out
}

/// Price and quantity, on every row: needs review; money at risk when the
/// application grants a price Stripe does not bill, or more seats.
fn billing_findings(
    row: &SubscriptionRow,
    app: &AppAccess,
    stripe: &SubscriptionFacts,
) -> Vec<SubscriptionFinding> {
    let mut out = Vec::new();
    let price = row.price.as_ref().and_then(Option::as_deref);
    if let Some(p) = price {
        if !stripe.has_price(p) {
            out.push(finding(
                FindingKind::SubscriptionPriceMismatch,
                Verdict::NeedsReview,
                app.grants,
            ));
        }
    }
    let billed = stripe.item_for(price).and_then(|i| i.quantity);
    if let (Some(Some(seats)), Some(billed)) = (row.quantity, billed) {
        if seats != billed {
            out.push(finding(
                FindingKind::SubscriptionQuantityMismatch,
                Verdict::NeedsReview,
                app.grants && seats > billed,
            ));
        }
    }
    out
}

/// Whether the row with `state` written would agree with Stripe on access
/// (docs/subscriptions.md, "What repairs automatically"): a repair never restores access
/// Stripe denies (a status-less row's period end written ahead while Stripe
/// is `unpaid`), nor leaves access Stripe ended. When it would not, the
/// repairable findings need review instead.
fn keeps_access(
    row: &SubscriptionRow,
    state: &SubscriptionState,
    (policy, now): (SubscriptionPolicy<'_>, DateTime<Utc>),
    stripe_grants: bool,
    findings: &mut [SubscriptionFinding],
) -> bool {
    let written = SubscriptionRow {
        status: row.status.as_ref().map(|_| state.status.clone()),
        period_end: state.period_end,
        ends_at: state.ends_at,
        ..row.clone()
    };
    let agrees = app_access(&written, policy, now).is_ok_and(|a| a.grants == stripe_grants);
    if !agrees {
        let note =
            "writing Stripe's values would not give the row Stripe's access: a person decides";
        for f in findings
            .iter_mut()
            .filter(|f| f.verdict == Verdict::Repairable)
        {
            f.verdict = Verdict::NeedsReview;
            f.note = Some(note.to_owned());
        }
    }
    agrees
}

/// The row's one repair when a finding is repairable: Stripe's values for
/// the configured columns. A status with no word in the map cannot be
/// written: its repairable findings need review instead.
fn repair_state(
    row: &SubscriptionRow,
    stripe: &SubscriptionFacts,
    policy: SubscriptionPolicy<'_>,
    findings: &mut [SubscriptionFinding],
) -> Option<SubscriptionState> {
    let repairable = |f: &SubscriptionFinding| f.verdict == Verdict::Repairable;
    if !findings.iter().any(repairable) {
        return None;
    }
    let status = match row.status {
        None => None,
        Some(_) => match policy.words.first_word(&stripe.status) {
            Some(word) => Some(word.to_owned()),
            None => {
                let note = format!(
                    "Stripe's status {} has no word in RECONCILER_SUBSCRIPTION_STATUSES: it cannot be written",
                    stripe.status
                );
                for f in findings.iter_mut().filter(|f| repairable(f)) {
                    f.verdict = Verdict::NeedsReview;
                    f.note = Some(note.clone());
                }
                return None;
            }
        },
    };
    Some(SubscriptionState {
        status,
        period_end: row
            .period_end
            .map(|_| stripe.ended_at.or_else(|| stripe.period_end())),
        ends_at: row.ends_at.map(|_| stripe.ends_at()),
    })
}
