//! Phase 3 of a subscriptions batch, in one transaction: the lease renewed,
//! the confirmed rows stamped, findings recorded once, findings no longer
//! seen cleared (their pending commands closed), one `ApplySubscriptionState`
//! per row with repairable findings and no command pending, and the cursor
//! moved by compare-and-set. A write the database refuses for one row
//! (a trigger, a constraint) is isolated: the batch is written row by row,
//! the refused row gets a `write_refused` finding, the others commit.

use serde_json::{json, Value};
use sqlx::{Acquire, PgConnection};

use super::groups::{SubscriptionsContext, Target};
use super::judge::Judged;
use super::summary::BatchCounts;
use crate::config::OutboxSettings;
use crate::key::{PaymentKey, Position};
use crate::outcome::RunError;
use crate::reconcile::Verdict;
use crate::store::refusal::{sqlstate_and_message, FailureClass};
use crate::store::subscriptions::commands::{self, SubscriptionCommand};
use crate::store::subscriptions::read::StoredSubscription;
use crate::store::subscriptions::record::{self, Confirmed, NewFinding};
use crate::store::subscriptions::APPLY_SUBSCRIPTION_STATE;
use crate::store::{cursor, outbox, Context, StoreError};

/// What phase 3 writes.
#[derive(Debug, Clone, Copy)]
pub struct Phase3<'a> {
    /// The rows read in phase 1.
    pub rows: &'a [StoredSubscription],
    /// The rows Stripe was asked about, judged.
    pub judged: &'a [Judged],
    /// The cursor phase 1 read.
    pub old: Option<&'a Position>,
    /// The batch read the table's last rows.
    pub wrapped: bool,
}

/// Writes phase 3 and moves the cursor, in one transaction.
///
/// # Errors
/// [`RunError::ConcurrentRun`] when the cursor or lease moved (all rolled
/// back); [`RunError::Store`] from the database.
pub async fn commit(
    ctx: &SubscriptionsContext<'_>,
    target: Target<'_>,
    p: Phase3<'_>,
    counts: &mut BatchCounts,
) -> Result<(), RunError> {
    let mut tx = crate::store::begin(ctx.pool)
        .await
        .context("opening a transaction")?;
    crate::lease::renew_held(&mut tx, ctx.lease.as_ref()).await?;
    let outbox = ctx.settings.outbox;
    let all: Vec<&Judged> = p.judged.iter().collect();
    let mut savepoint = tx.begin().await.context("opening a savepoint")?;
    match write(&mut savepoint, outbox, target.job, p.rows, &all).await {
        Ok(w) => {
            savepoint.commit().await.context("releasing a savepoint")?;
            w.add_to(counts);
        }
        Err(e) if FailureClass::of_store(&e) == FailureClass::PerRow => {
            savepoint
                .rollback()
                .await
                .context("rolling back a savepoint")?;
            isolate(&mut tx, (outbox, target.job), &p, counts).await?;
        }
        Err(e) => return Err(e.into()),
    }
    let moved = if p.wrapped {
        cursor::complete_cycle(&mut tx, target.job, p.old).await?
    } else {
        let last = p.rows.last().map(|r| Position {
            key: r.key.clone(),
            created_at: None,
        });
        cursor::advance(
            &mut tx,
            target.job,
            p.old,
            (last.as_ref(), p.rows.len() as u64),
        )
        .await?
    };
    if !moved {
        return Err(RunError::ConcurrentRun {
            job: target.job.to_owned(),
        });
    }
    tx.commit().await.context("committing the batch")?;
    Ok(())
}

/// Row by row, each in a savepoint: a refused row gets `write_refused`.
async fn isolate(
    conn: &mut PgConnection,
    (outbox, job): (&OutboxSettings, &str),
    p: &Phase3<'_>,
    counts: &mut BatchCounts,
) -> Result<(), RunError> {
    for j in p.judged {
        let mut savepoint = conn.begin().await.context("opening a savepoint")?;
        match write(&mut savepoint, outbox, job, p.rows, &[j]).await {
            Ok(w) => {
                savepoint.commit().await.context("releasing a savepoint")?;
                w.add_to(counts);
            }
            Err(e) if FailureClass::of_store(&e) == FailureClass::PerRow => {
                savepoint
                    .rollback()
                    .await
                    .context("rolling back a savepoint")?;
                let (sqlstate, message) = sqlstate_and_message(&e.source).unwrap_or_default();
                tracing::warn!(key = %j.key, %sqlstate, %message, "the database refused this subscription row's writes");
                let refused = NewFinding {
                    key: Some(j.key.clone()),
                    stripe_id: row_of(p.rows, &j.key).and_then(|r| r.stripe_id.clone()),
                    kind: "write_refused".to_owned(),
                    local_status: j
                        .findings
                        .first()
                        .map_or_else(String::new, |f| f.local_status.clone()),
                    external_status: j.confirmed.clone(),
                    details: json!({"sqlstate": sqlstate, "message": message, "observed_external_status": j.confirmed}),
                    account: None,
                };
                let recorded = record::record(&mut *conn, &[refused]).await?;
                counts.findings_created += recorded.iter().filter(|r| r.created).count() as u64;
                counts.writes_refused += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

fn row_of<'a>(rows: &'a [StoredSubscription], key: &PaymentKey) -> Option<&'a StoredSubscription> {
    rows.iter().find(|r| &r.key == key)
}

/// What [`write`] did.
#[derive(Debug, Default)]
pub struct Written {
    /// Findings newly recorded.
    pub created: u64,
    /// Findings cleared.
    pub cleared: u64,
    /// Commands enqueued.
    pub enqueued: u64,
}

impl Written {
    fn add_to(&self, counts: &mut BatchCounts) {
        counts.findings_created += self.created;
        counts.findings_cleared += self.cleared;
        counts.commands_enqueued += self.enqueued;
    }
}

/// The writes of `judged` (rows of `rows`) for `job`: stamps, findings,
/// cleared findings and their pending commands closed, commands. Shared by
/// the scan and the events job.
///
/// # Errors
/// [`StoreError`] from the database (a refusal included: the caller isolates).
pub async fn write(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    job: &str,
    rows: &[StoredSubscription],
    judged: &[&Judged],
) -> Result<Written, StoreError> {
    let answered: Vec<&&Judged> = judged
        .iter()
        .filter(|j| j.verdict != Verdict::Unverifiable)
        .collect();
    let confirmed: Vec<Confirmed> = answered
        .iter()
        .filter_map(|j| {
            Some(Confirmed {
                key: j.key.clone(),
                stripe_id: row_of(rows, &j.key)?.stripe_id.clone()?,
                status: j.confirmed.clone()?,
            })
        })
        .collect();
    record::stamp(&mut *conn, job, &confirmed).await?;
    let findings: Vec<NewFinding> = answered.iter().flat_map(|j| j.findings.clone()).collect();
    let recorded = record::record(&mut *conn, &findings).await?;
    let keys: Vec<PaymentKey> = answered.iter().map(|j| j.key.clone()).collect();
    let kept: Vec<(PaymentKey, String)> = findings
        .iter()
        .filter_map(|f| Some((f.key.clone()?, f.kind.clone())))
        .collect();
    let cleared = record::clear_stale(&mut *conn, &keys, &kept).await?;
    outbox::close_for_findings(
        &mut *conn,
        outbox,
        &[APPLY_SUBSCRIPTION_STATE],
        &cleared,
        "finding cleared by a later read",
    )
    .await?;
    withdraw(&mut *conn, outbox, &answered, &recorded).await?;
    let enqueued = enqueue(&mut *conn, outbox, rows, &answered, &recorded).await?;
    Ok(Written {
        created: recorded.iter().filter(|r| r.created).count() as u64,
        cleared: cleared.len() as u64,
        enqueued,
    })
}

/// Closes the pending commands of rows a later read no longer repairs
/// (Stripe's state moved: an `active` subscription now `past_due`, whose
/// restore waits for a person), their findings kept open.
async fn withdraw(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    judged: &[&&Judged],
    recorded: &[record::Recorded],
) -> Result<u64, StoreError> {
    let ids: Vec<i64> = recorded
        .iter()
        .filter(|r| {
            judged
                .iter()
                .any(|j| j.repair.is_none() && r.key.as_ref() == Some(&j.key))
        })
        .map(|r| r.id)
        .collect();
    let note = "no longer repairable by a later read: a person decides";
    outbox::close_for_findings(conn, outbox, &[APPLY_SUBSCRIPTION_STATE], &ids, note).await
}

/// One command per row with a repair, its repairable findings open, and no
/// command of ours pending.
async fn enqueue(
    conn: &mut PgConnection,
    outbox: &OutboxSettings,
    rows: &[StoredSubscription],
    judged: &[&&Judged],
    recorded: &[record::Recorded],
) -> Result<u64, StoreError> {
    let with_repair: Vec<&&Judged> = judged
        .iter()
        .copied()
        .filter(|j| j.repair.is_some())
        .collect();
    let keys: Vec<PaymentKey> = with_repair.iter().map(|j| j.key.clone()).collect();
    let pending = commands::pending(&mut *conn, outbox, &keys).await?;
    let mut out = Vec::new();
    for j in with_repair
        .into_iter()
        .filter(|j| !pending.contains(&j.key))
    {
        let ids: Vec<i64> = recorded
            .iter()
            .filter(|r| r.key.as_ref() == Some(&j.key) && j.repairable.contains(&r.kind))
            .map(|r| r.id)
            .collect();
        let (Some(row), false) = (row_of(rows, &j.key), ids.is_empty()) else {
            continue;
        };
        out.push(SubscriptionCommand {
            key: j.key.clone(),
            payload: payload(row, j, &ids),
            finding_ids: ids,
        });
    }
    commands::enqueue(conn, outbox, &out).await
}

/// The command's payload (docs/findings.md, "Applying subscription repairs
/// yourself"): the row, its findings, Stripe's subscription and status, and
/// per carried column the value the scan saw (`expected`) and Stripe's
/// (`apply`); instants in epoch seconds.
fn payload(row: &StoredSubscription, j: &Judged, finding_ids: &[i64]) -> Value {
    let Some((expected, apply, carried)) = &j.repair else {
        return Value::Null;
    };
    let mut exp = serde_json::Map::new();
    let mut app = serde_json::Map::new();
    if carried.status {
        exp.insert("status".into(), json!(expected.status));
        app.insert("status".into(), json!(apply.status));
    }
    if carried.period_end {
        exp.insert("period_end".into(), json!(expected.period_end));
        app.insert("period_end".into(), json!(apply.period_end));
    }
    if carried.ends_at {
        exp.insert("ends_at".into(), json!(expected.ends_at));
        app.insert("ends_at".into(), json!(apply.ends_at));
    }
    let mut p = json!({
        "subscription_id": row.key.as_str(),
        "finding_id": finding_ids.first(),
        "finding_ids": finding_ids,
        "stripe_subscription_id": row.stripe_id,
        "stripe_status": j.confirmed,
        "expected": exp,
        "apply": app,
    });
    if let Some(account) = row.account.as_deref().filter(|a| !a.trim().is_empty()) {
        p["stripe_account_id"] = Value::from(account);
    }
    p
}
