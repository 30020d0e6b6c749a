//! The upgrade steps `migrate` runs after the migrations (docs/schema.md,
//! "Upgrades: what `migrate` removes, and under which lock"): remove
//! what earlier releases added to the application's `payments` — the foreign
//! key from `reconciliation_findings`, the indexes `payments_reconciled_or_created`
//! and `payments_never_reconciled`, the columns `observed_external_status`
//! and `last_reconciled_at` — only where the reconciler's own history shows
//! it added them ([`crate::store::legacy`] has the rule and the locks). Each
//! step either completes, is deferred (its lock was not available: reported,
//! retried by the next `migrate`) or is refused by the database (kept,
//! reported). A fresh install has none of them, so every step finds nothing.

use sqlx::PgConnection;

use crate::store::legacy::{self, Removal};
use crate::store::{begin, Context, StoreError};
use crate::terminal::escape;

/// One removal and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What was removed, e.g. `index payments_never_reconciled`.
    pub object: String,
    /// Done, deferred or refused.
    pub outcome: Removal,
}

/// What the upgrade steps did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UpgradeReport {
    /// The removals attempted, in order.
    pub steps: Vec<Step>,
    /// Columns of that name the application owns (the reconciler did not add
    /// them): never touched.
    pub kept_columns: Vec<String>,
}

impl UpgradeReport {
    /// Whether a step is left for the next `migrate`.
    pub fn deferred(&self) -> bool {
        self.steps.iter().any(|s| s.outcome == Removal::Deferred)
    }

    /// One line per step and per kept column, for `migrate`'s output.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = self
            .steps
            .iter()
            .map(|s| match &s.outcome {
                Removal::Done => format!("removed the {} an earlier release added", s.object),
                Removal::Deferred => format!(
                    "deferred: the {} an earlier release added is still there; its lock was not available without waiting (the application's transactions go first); run migrate again later to remove it",
                    s.object
                ),
                Removal::Refused(why) => format!(
                    "kept the {} an earlier release added: the database refused to remove it ({})",
                    s.object,
                    escape(why)
                ),
            })
            .collect();
        for column in &self.kept_columns {
            lines.push(format!(
                "payments.{column} is the application's own (it existed before the reconciler's migration 1): not touched"
            ));
        }
        lines
    }
}

/// Runs the removals in order: the foreign key, the indexes, the columns.
/// `conn` must be outside any transaction (an index is dropped
/// `CONCURRENTLY`).
///
/// # Errors
/// [`StoreError`] for a database failure other than a lock not available or
/// a refusal.
pub async fn remove_legacy(conn: &mut PgConnection) -> Result<UpgradeReport, StoreError> {
    let mut report = UpgradeReport::default();
    // What to remove, read in one transaction (pooler-safe: docs/schema.md).
    let mut tx = begin(&mut *conn).await.context("opening a transaction")?;
    if !crate::store::payment_index::payments_exists(&mut tx).await? {
        return Ok(report);
    }
    let foreign_keys = legacy::foreign_keys(&mut tx).await?;
    let indexes = legacy::reconciler_indexes(&mut tx).await?;
    let columns = legacy::reconciler_columns(&mut tx).await?;
    tx.commit().await.context("closing a transaction")?;
    for name in foreign_keys {
        let outcome = legacy::drop_foreign_key(&mut *conn, &name).await?;
        report.steps.push(Step {
            object: format!(
                "foreign key {name} (reconciliation_findings.payment_id → payments.id)"
            ),
            outcome,
        });
    }
    for name in indexes {
        let outcome = legacy::drop_index_concurrently(&mut *conn, &name).await?;
        report.steps.push(Step {
            object: format!("index {name} on payments"),
            outcome,
        });
    }
    if !columns.is_empty() {
        let outcome = legacy::drop_columns(&mut *conn, &columns).await?;
        report.steps.push(Step {
            object: format!("columns payments.{}", columns.join(", payments.")),
            outcome,
        });
    }
    let mut tx = begin(&mut *conn).await.context("opening a transaction")?;
    report.kept_columns = legacy::applications_columns(&mut tx).await?;
    tx.commit().await.context("closing a transaction")?;
    for step in &report.steps {
        match &step.outcome {
            Removal::Done => {
                tracing::info!(object = %step.object, "removed what an earlier release added to payments")
            }
            Removal::Deferred => {
                tracing::warn!(object = %step.object, "lock not available: removal deferred to the next migrate")
            }
            Removal::Refused(why) => {
                tracing::warn!(object = %step.object, reason = %why, "the database refused the removal; kept")
            }
        }
    }
    Ok(report)
}
