//! The scan's writes: record a batch's findings once per open (payment,
//! kind), tell which a dry run would create, and resolve the ones a fresh
//! Stripe answer no longer supports (`cleared`, `superseded`).

use std::collections::HashMap;

use sqlx::PgConnection;

use crate::key::{KeyType, PaymentKey, Position, Walk};
use crate::reconcile::{fingerprint, Resolution};
use crate::store::{query_as, query_scalar, Context, StoreError};

/// A finding to record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewFinding {
    /// `payments.id`
    pub payment_id: PaymentKey,
    /// The kind's database string (`missed_success`, `unexpected:a->b`, ...).
    pub kind: String,
    /// `payments.status` when detected.
    pub local_status: String,
    /// Stripe's status when detected; `None` when Stripe had nothing to say.
    pub external_status: Option<String>,
    /// What a person needs to judge it (amounts, currency, deadlines).
    pub details: Option<serde_json::Value>,
    /// A person's manual resolution of the same drift (the latest finding of
    /// the same payment and kind resolved by hand has the same
    /// [`crate::reconcile::fingerprint`]) keeps it closed
    /// ([`crate::reconcile::acknowledgeable`]). `false` for a kind never
    /// acknowledged, and where closing it would hide drift of the payment's
    /// status (e.g. a refund on a row `pending` here while Stripe
    /// succeeded): such a finding reopens until the status is dealt with.
    pub acknowledgeable: bool,
    /// The connected account (`acct_…`) the reads went to; `None`: the
    /// platform's own account (docs/connect.md).
    pub stripe_account_id: Option<String>,
    /// The payment's Checkout Session (`cs_…`) when it was judged by its
    /// session (no PaymentIntent id; docs/checkout-sessions.md); `None` otherwise.
    pub checkout_session_id: Option<String>,
    /// The session's PaymentIntent when it was judged by its session and
    /// the session has one; `None` otherwise (the payment's own column
    /// names it).
    pub stripe_payment_intent_id: Option<String>,
}

/// The latest finding resolved by hand of each (payment, kind) of
/// `findings` that may be acknowledged: what it was resolved for.
#[derive(sqlx::FromRow)]
struct ResolvedByHand {
    payment_id: PaymentKey,
    kind: String,
    local_status: String,
    external_status: Option<String>,
    details: Option<serde_json::Value>,
}

/// For each of `findings`, whether a person already resolved the same drift
/// by hand (an acknowledgement): it is acknowledgeable and the latest finding
/// of its payment and kind resolved as [`Resolution::Manual`] has the same
/// [`fingerprint`]. One index lookup per finding on
/// `reconciliation_findings (payment_id, kind)`.
async fn acknowledged(
    conn: &mut PgConnection,
    key: &KeyType,
    findings: &[NewFinding],
) -> Result<Vec<bool>, StoreError> {
    let asked: Vec<&NewFinding> = findings.iter().filter(|f| f.acknowledgeable).collect();
    if asked.is_empty() {
        return Ok(vec![false; findings.len()]);
    }
    let sql = format!(
        "SELECT DISTINCT ON (r.payment_id, r.kind)
                r.payment_id::text AS payment_id, r.kind, r.local_status, r.external_status,
                r.details
           FROM unnest({}, $2::text[]) AS v(payment_id, kind)
           JOIN reconciliation_findings r ON r.payment_id = v.payment_id AND r.kind = v.kind
          WHERE r.resolution = $3
          ORDER BY r.payment_id, r.kind, r.resolved_at DESC, r.id DESC",
        key.cast_array("$1")
    );
    let payment_ids: Vec<&PaymentKey> = asked.iter().map(|f| &f.payment_id).collect();
    let kinds: Vec<&str> = asked.iter().map(|f| f.kind.as_str()).collect();
    let resolved: Vec<ResolvedByHand> = query_as(&sql)
        .bind(payment_ids)
        .bind(kinds)
        .bind(Resolution::Manual.as_str())
        .fetch_all(conn)
        .await
        .context("reading the findings resolved by hand")?;
    let by_key: HashMap<(&PaymentKey, &str), Option<serde_json::Value>> = resolved
        .iter()
        .map(|r| {
            let print = fingerprint(
                &r.kind,
                &r.local_status,
                r.external_status.as_deref(),
                r.details.as_ref(),
            );
            ((&r.payment_id, r.kind.as_str()), print)
        })
        .collect();
    Ok(findings
        .iter()
        .map(|f| {
            f.acknowledgeable
                && by_key
                    .get(&(&f.payment_id, f.kind.as_str()))
                    .and_then(Option::as_ref)
                    .is_some_and(|was| {
                        fingerprint(
                            &f.kind,
                            &f.local_status,
                            f.external_status.as_deref(),
                            f.details.as_ref(),
                        )
                        .as_ref()
                            == Some(was)
                    })
        })
        .collect())
}

/// The findings as parallel arrays: `$1` payment ids, `$2` kinds, `$3` local
/// statuses, `$4` external statuses, `$5` details, `$6` acknowledged (see
/// [`acknowledged`]: such a finding is not recorded), `$7` accounts, `$8`
/// Checkout Sessions, `$9` the sessions' PaymentIntents.
fn bind_findings<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    findings: &'q [NewFinding],
    acknowledged: Vec<bool>,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    query
        .bind(
            findings
                .iter()
                .map(|f| &f.payment_id)
                .collect::<Vec<&PaymentKey>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.kind.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.local_status.as_str())
                .collect::<Vec<&str>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.external_status.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.details.as_ref())
                .collect::<Vec<Option<&serde_json::Value>>>(),
        )
        .bind(acknowledged)
        .bind(
            findings
                .iter()
                .map(|f| f.stripe_account_id.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.checkout_session_id.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
        .bind(
            findings
                .iter()
                .map(|f| f.stripe_payment_intent_id.as_deref())
                .collect::<Vec<Option<&str>>>(),
        )
}

/// The unnested findings, `v`, the keys cast to the key columns' type.
fn unnest_findings(key: &KeyType) -> String {
    format!(
        "unnest({}, $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::bool[], $7::text[],
                   $8::text[], $9::text[])
                AS v(payment_id, kind, local_status, external_status, details, acknowledged,
                     stripe_account_id, checkout_session_id, stripe_payment_intent_id)",
        key.cast_array("$1")
    )
}

/// A finding the upsert touched.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CreatedFinding {
    /// `reconciliation_findings.id`
    pub id: i64,
    /// `payments.id`
    pub payment_id: PaymentKey,
    /// The kind's database string.
    pub kind: String,
    /// The row was inserted now (`false`: it was already open and only its
    /// `external_status`, `details` and `last_seen_at` were refreshed).
    pub created: bool,
}

/// Records the findings in one statement. A finding already open for the
/// same (payment, kind) is not duplicated: its `external_status`, `details`
/// and `last_seen_at` are refreshed, so the review queue shows Stripe's
/// current state. A drift a person already resolved by hand (the same
/// [`fingerprint`]: an acknowledgement, e.g. a partial refund that is fine)
/// is not opened again. Returns every open finding touched,
/// with `created` telling new ones apart.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn upsert_open(
    conn: &mut PgConnection,
    key: &KeyType,
    findings: &[NewFinding],
) -> Result<Vec<CreatedFinding>, StoreError> {
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "INSERT INTO reconciliation_findings
                (payment_id, kind, local_status, external_status, details, last_seen_at,
                 stripe_account_id, checkout_session_id, stripe_payment_intent_id)
         SELECT v.payment_id, v.kind, v.local_status, v.external_status, v.details, now(),
                v.stripe_account_id, v.checkout_session_id, v.stripe_payment_intent_id
           FROM {}
          WHERE NOT v.acknowledged
          ORDER BY v.payment_id
         ON CONFLICT (payment_id, kind) WHERE resolved_at IS NULL DO UPDATE
            SET external_status = EXCLUDED.external_status,
                details = EXCLUDED.details,
                last_seen_at = now(),
                stripe_account_id = EXCLUDED.stripe_account_id,
                checkout_session_id = EXCLUDED.checkout_session_id,
                stripe_payment_intent_id = EXCLUDED.stripe_payment_intent_id
         RETURNING id, payment_id::text AS payment_id, kind, (xmax = 0) AS created",
        unnest_findings(key)
    );
    let acknowledged = acknowledged(&mut *conn, key, findings).await?;
    bind_findings(query_as(&sql), findings, acknowledged)
        .fetch_all(conn)
        .await
        .context("recording findings")
}

/// Of these findings, the `(payment_id, kind)` pairs [`upsert_open`] would
/// create: not already open, not acknowledged. For `run --dry-run`, which
/// writes nothing.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn not_yet_open(
    conn: &mut PgConnection,
    key: &KeyType,
    findings: &[NewFinding],
) -> Result<Vec<(PaymentKey, String)>, StoreError> {
    if findings.is_empty() {
        return Ok(Vec::new());
    }
    let sql = format!(
        "SELECT DISTINCT v.payment_id::text, v.kind
           FROM {}
          WHERE NOT EXISTS (SELECT 1 FROM reconciliation_findings f
                             WHERE f.payment_id = v.payment_id AND f.kind = v.kind
                               AND f.resolved_at IS NULL)
            AND NOT v.acknowledged",
        unnest_findings(key)
    );
    let acknowledged = acknowledged(&mut *conn, key, findings).await?;
    bind_findings(query_as(&sql), findings, acknowledged)
        .fetch_all(conn)
        .await
        .context("counting findings a run would create")
}

/// For payments Stripe has just answered for, resolves every open finding
/// whose kind is no longer what the scan decides: `cleared` when the payment
/// now has no finding, `superseded` when it has another (e.g. the
/// PaymentIntent's status moved on, a refund was seen); a `write_refused`
/// finding is `cleared` either way, since the write now went through.
/// `current[i]` is the kind decided for `payment_ids[i]` (NULL for none).
/// Where `with_status[i]`
/// is false (a 404, a malformed id: an answer that says nothing about the
/// money), open findings of the money kinds stay open: only a later answer
/// that shows the money can clear them. Returns the ids of the findings
/// resolved, so their repair commands can be closed in the same transaction.
/// The caller holds the payments' row locks (payment before finding,
/// everywhere).
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve_stale(
    conn: &mut PgConnection,
    key: &KeyType,
    payment_ids: &[PaymentKey],
    current: &[Option<String>],
    with_status: &[bool],
) -> Result<Vec<i64>, StoreError> {
    if payment_ids.is_empty() {
        return Ok(Vec::new());
    }
    // Each key's open findings are probed by index in a lateral subquery,
    // then updated by primary key: as a join of the keys with the findings
    // the planner scanned every finding of the table for each batch (a cost
    // growing with the findings a first cycle has made so far).
    let sql = format!(
        "WITH m AS MATERIALIZED (
             SELECT o.id,
                    CASE WHEN v.kind IS NULL OR o.kind = $7 THEN $5::text ELSE $6::text END
                        AS resolution
               FROM unnest({}, $2::text[], $3::bool[]) AS v(payment_id, kind, with_status)
              CROSS JOIN LATERAL (
                    SELECT o.id, o.kind FROM reconciliation_findings o
                     WHERE o.payment_id = v.payment_id AND o.resolved_at IS NULL
                       AND o.kind IS DISTINCT FROM v.kind
                       AND (v.with_status OR NOT o.kind = ANY($4))
                    OFFSET 0) o)
         UPDATE reconciliation_findings f
            SET resolved_at = now(),
                resolution = (SELECT m.resolution FROM m WHERE m.id = f.id LIMIT 1)
          WHERE f.id = ANY(ARRAY(SELECT m.id FROM m)) AND f.resolved_at IS NULL
         RETURNING f.id",
        key.cast_array("$1")
    );
    query_scalar(&sql)
        .bind(payment_ids)
        .bind(current)
        .bind(with_status)
        .bind(crate::reconcile::FindingKind::money_kinds())
        .bind(Resolution::Cleared.as_str())
        .bind(Resolution::Superseded.as_str())
        .bind(
            crate::reconcile::FindingKind::WriteRefused
                .as_str()
                .into_owned(),
        )
        .fetch_all(conn)
        .await
        .context("resolving findings the scan no longer sees")
}

/// Resolves as [`Resolution::PaymentDeleted`] the open findings about a
/// payment that no longer exists in `payments`, among the keys in the walked
/// range `(after, through]` (a batch's range; `None`: from the cycle's
/// start, to the table's end) and the keys of `also` (the batch's rows,
/// and the keys whose state rows the batch forgot in its range,
/// [`crate::store::payment_state::forget_deleted`]). In a `(created_at, id)`
/// walk findings hold no `created_at`: the range is the state rows the batch
/// forgot, and, on the batch that ends the cycle (`through` `None`), every
/// open finding: a payment can hold a finding and no state row (a
/// `write_refused` row read behind the cursor, deleted before it was ever
/// recorded), so each open finding is still looked at once per cycle, not
/// once per batch. One primary-key probe of `payments` per finding
/// (`OFFSET 0`: as an anti-join the planner hashed the whole of `payments`
/// every batch). Returns the ids of the findings resolved,
/// so their repair commands are closed in the same transaction. The
/// payment's key is a value here, never a foreign key: the application
/// deletes its rows freely.
///
/// # Errors
/// [`StoreError`] from the database.
pub async fn resolve_deleted(
    conn: &mut PgConnection,
    key: &KeyType,
    (after, through): (Option<&Position>, Option<&Position>),
    also: &[PaymentKey],
) -> Result<Vec<i64>, StoreError> {
    let range = match key.walk() {
        Walk::CreatedAt if through.is_none() => "TRUE".to_owned(),
        Walk::CreatedAt => "FALSE".to_owned(),
        Walk::Key => {
            let mut parts = vec!["TRUE".to_owned()];
            if after.is_some() {
                parts.push(format!("o.payment_id > {}", key.cast("$1")));
            }
            if through.is_some() {
                parts.push(format!("o.payment_id <= {}", key.cast("$2")));
            }
            parts.join(" AND ")
        }
    };
    // The open findings of the range and of the keys, each found by its own
    // index range (an `OR` of the two read every open finding), then
    // updated by primary key.
    let sql = format!(
        "UPDATE reconciliation_findings f
            SET resolved_at = now(), resolution = $4
          WHERE f.id = ANY(ARRAY(
                    SELECT o.id FROM reconciliation_findings o
                     WHERE o.resolved_at IS NULL AND o.payment_id IS NOT NULL AND ({range})
                    UNION
                    SELECT o.id FROM unnest({}) AS k(id)
                     CROSS JOIN LATERAL (SELECT o.id FROM reconciliation_findings o
                                          WHERE o.payment_id = k.id AND o.resolved_at IS NULL
                                         OFFSET 0) o))
            AND f.resolved_at IS NULL AND f.payment_id IS NOT NULL
            AND NOT EXISTS (SELECT 1 FROM payments p WHERE p.id = f.payment_id OFFSET 0)
         RETURNING f.id",
        key.cast_array("$3")
    );
    query_scalar(&sql)
        .bind(after.map(|p| &p.key))
        .bind(through.map(|p| &p.key))
        .bind(also)
        .bind(Resolution::PaymentDeleted.as_str())
        .fetch_all(conn)
        .await
        .context("resolving the findings of deleted payments")
}
