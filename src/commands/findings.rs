//! `stripe-reconciler findings list|resolve`: the review queue.

use super::CommandError;
use crate::config::Settings;
use crate::dashboard::DashboardMode;
use crate::reconcile::RepairCommand;
use secrecy::ExposeSecret;

use crate::repair::worker::MAX_ATTEMPTS;
use crate::store::{findings, outbox, payments, Context};
use crate::terminal::{account_or_platform, escape, shorten_or_dash, shown};

/// What `findings list` selects.
#[derive(Debug, Clone, Copy)]
pub(super) struct ListQuery<'a> {
    /// Only this kind.
    pub kind: Option<&'a str>,
    /// Only unresolved findings.
    pub open: bool,
    /// At most this many rows.
    pub limit: i64,
}

/// One line of `findings list --json`: the finding and its Dashboard link.
#[derive(serde::Serialize)]
struct ListedFinding<'a> {
    #[serde(flatten)]
    finding: &'a findings::FindingView,
    /// `None` when the stored id is not a well-formed PaymentIntent id.
    dashboard_url: Option<String>,
    /// What disagrees: `{field, local, stripe}` (DESIGN.md, Turn 4 contract).
    differs: crate::reconcile::Differs,
}

/// Lists findings as a table, or JSON lines with `--json`, each with a link
/// to its PaymentIntent in the Stripe Dashboard, and says when `--limit` cut
/// the list (on stderr with `--json`, so stdout stays JSON lines).
pub(super) async fn list(
    settings: &Settings,
    q: ListQuery<'_>,
    json: bool,
    dashboard: Option<DashboardMode>,
) -> Result<(), CommandError> {
    let mode = DashboardMode::choose(
        dashboard,
        settings.stripe.api_key.as_ref().map(|k| k.expose_secret()),
    );
    let (_pool, mut conn) = super::connect(settings).await?;
    let mut conn = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    let rows = findings::list(&mut conn, q.kind, q.open, q.limit)
        .await
        .map_err(CommandError::Store)?;
    let total = findings::count(&mut conn, q.kind, q.open)
        .await
        .map_err(CommandError::Store)?;
    let link = |f: &findings::FindingView| {
        crate::dashboard::finding_url(
            f.stripe_account_id.as_deref(),
            f.stripe_payment_intent_id.as_deref(),
            f.checkout_session_id.as_deref(),
            mode,
        )
    };
    let shown = rows.len() as i64;
    let cut = (total > shown).then(|| {
        format!(
            "showing {shown} of {total} findings, newest first (--limit {}; raise it to see more)",
            q.limit
        )
    });
    if json {
        for f in &rows {
            let line = serde_json::to_string(&ListedFinding {
                finding: f,
                dashboard_url: link(f),
                differs: f.differs(),
            })?;
            println!("{line}");
        }
        if let Some(note) = cut {
            eprintln!("{note}");
        }
        return Ok(());
    }
    print!("{}", render(&rows, &link));
    println!("{}", cut.unwrap_or_else(|| format!("{shown} finding(s)")));
    Ok(())
}

/// The table of `findings list`: one line per finding, every stored string
/// escaped ([`crate::terminal`]; issue 21), so `--json` is the only exact form.
fn render(
    rows: &[findings::FindingView],
    link: &dyn Fn(&findings::FindingView) -> Option<String>,
) -> String {
    let mut out = format!(
        "{:>8}  {:>10}  {:<16}  {:<28}  {:<21}  {:<32}  {:<8}  {:<24}  {:<19}  {:<62}  {:<10}  {:<32}  details\n",
        "id",
        "payment",
        "order",
        "payment intent",
        "account",
        "kind",
        "local",
        "stripe",
        "detected",
        "stripe dashboard",
        "resolution",
        "differs"
    );
    for f in rows {
        let resolution = match (&f.resolution, &f.resolved_by) {
            (None, _) => "open".to_owned(),
            (Some(r), Some(by)) => format!(
                "{r} by {by}: {}",
                f.resolution_note.as_deref().unwrap_or("")
            ),
            (Some(r), None) => r.clone(),
        };
        // Every stored string is escaped before it is padded: one finding is
        // one line, and nothing in a shown can drive the terminal.
        out.push_str(&format!(
            "{:>8}  {:>10}  {:<16}  {:<28}  {:<21}  {:<32}  {:<8}  {:<24}  {:<19}  {:<62}  {:<10}  {:<32}  {}\n",
            f.id,
            shorten_or_dash(f.payment_key().as_deref()),
            shorten_or_dash(f.order_id.as_deref()),
            shorten_or_dash(f.stripe_payment_intent_id.as_deref()),
            account_or_platform(f.stripe_account_id.as_deref()),
            shown(&f.kind),
            shown(&f.local_status),
            shorten_or_dash(f.external_status.as_deref()),
            f.detected_at.format("%Y-%m-%d %H:%M:%S"),
            shorten_or_dash(link(f).as_deref()),
            shown(&resolution),
            shown(&f.differs().phrase),
            shown(&details(f))
        ));
    }
    out
}

/// What a person needs to judge a finding: how long until (or since) its
/// deadline for the aging kinds, then its details (amounts in minor units,
/// currency, refund share, last error).
fn details(f: &findings::FindingView) -> String {
    let deadline = f.seconds_to_deadline.map(|s| {
        if s >= 0.0 {
            format!("deadline in {}; ", crate::terminal::human_duration(s))
        } else {
            format!(
                "deadline passed {} ago; ",
                crate::terminal::human_duration(-s)
            )
        }
    });
    format!(
        "{}{}",
        deadline.unwrap_or_default(),
        f.details
            .as_ref()
            .map_or_else(|| "-".to_owned(), |d| d.to_string())
    )
}

/// Resolves one open finding by hand, keeping who and why. Refuses a finding
/// whose repair command is still pending (the repair would still apply).
pub(super) async fn resolve(
    settings: &Settings,
    id: i64,
    note: &str,
    by: Option<&str>,
) -> Result<(), CommandError> {
    if note.trim().is_empty() {
        return Err(CommandError::Usage(
            "--note must say why the finding is resolved".into(),
        ));
    }
    let by = match by.map(str::trim) {
        Some(by) if !by.is_empty() => by,
        _ => {
            return Err(CommandError::Usage(
                "say who resolves the finding: --by NAME (or set USER)".into(),
            ))
        }
    };
    let (_pool, mut conn) = super::connect(settings).await?;
    let types = RepairCommand::EVENT_TYPES;
    let mut tx = crate::store::begin(&mut *conn)
        .await
        .context("opening a transaction")
        .map_err(CommandError::Store)?;
    // Payment before finding, like every writer: no deadlock with a scan.
    payments::lock_for_finding(&mut tx, id)
        .await
        .map_err(CommandError::Store)?;
    if outbox::has_pending_repair(&mut tx, &settings.outbox, &types, id, MAX_ATTEMPTS)
        .await
        .map_err(CommandError::Store)?
    {
        return Err(CommandError::Refused(format!(
            "finding {id} has a repair command pending in the outbox; run `stripe-reconciler repair` instead"
        )));
    }
    if !findings::resolve_manually(&mut tx, id, by, note)
        .await
        .map_err(CommandError::Store)?
    {
        return Err(CommandError::Refused(format!(
            "finding {id} does not exist or is already resolved"
        )));
    }
    let closed = outbox::close_for_findings(
        &mut tx,
        &settings.outbox,
        &types,
        &[id],
        "superseded by a manual resolution",
    )
    .await
    .map_err(CommandError::Store)?;
    tx.commit()
        .await
        .context("committing the resolution")
        .map_err(CommandError::Store)?;
    if closed > 0 {
        tracing::info!(
            finding_id = id,
            commands = closed,
            "closed the finding's stuck repair commands"
        );
    }
    tracing::info!(
        finding_id = id,
        resolved_by = by,
        "finding resolved by hand"
    );
    println!("finding {id} resolved by {}", escape(by));
    Ok(())
}
