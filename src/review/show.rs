//! `findings show ID`: the finding, what differs, its Dashboard link and its
//! history (every finding of the same payment and kind).

use sqlx::PgConnection;

use super::ReviewError;
use crate::dashboard::DashboardMode;
use crate::store::findings::{self, FindingView, HistoryEntry};
use crate::terminal::{account_or_platform, shorten_or_dash, shown};

/// `findings show ID --json`.
#[derive(serde::Serialize)]
struct Shown<'a> {
    #[serde(flatten)]
    finding: &'a FindingView,
    dashboard_url: Option<String>,
    differs: crate::reconcile::Differs,
    history: &'a [HistoryEntry],
}

/// Prints finding `id` on stdout with its Dashboard link (`mode`) and its
/// history, escaped; with `json`, as one object.
///
/// # Errors
/// [`ReviewError::Refused`] when the finding does not exist,
/// [`ReviewError::Store`] when it cannot be read, [`ReviewError::Output`]
/// when it cannot be serialised.
pub async fn show(
    conn: &mut PgConnection,
    id: i64,
    json: bool,
    mode: DashboardMode,
) -> Result<(), ReviewError> {
    let Some(f) = findings::find(&mut *conn, id).await? else {
        return Err(ReviewError::Refused(format!("finding {id} does not exist")));
    };
    let history = findings::history(&mut *conn, id).await?;
    if json {
        let shown = Shown {
            finding: &f,
            dashboard_url: f.dashboard_url(mode),
            differs: f.differs(),
            history: &history,
        };
        println!("{}", serde_json::to_string(&shown)?);
        return Ok(());
    }
    print!("{}", render(&f, f.dashboard_url(mode).as_deref(), &history));
    Ok(())
}

/// The text of `findings show`: one labelled line per field, then the
/// history, one line per event.
fn render(f: &FindingView, link: Option<&str>, history: &[HistoryEntry]) -> String {
    let state = match (&f.resolution, &f.resolved_at) {
        (Some(r), Some(at)) => format!("{} at {}", shown(r), at.format("%Y-%m-%d %H:%M:%S")),
        _ => "open".to_owned(),
    };
    let mut out = format!(
        "finding {}  {}  {state}\n\
         payment:        {}\n\
         order:          {}\n\
         payment intent: {}\n\
         account:        {}\n\
         local status:   {}\n\
         stripe status:  {}\n\
         differs:        {}\n\
         details:        {}\n\
         detected:       {}\n\
         dashboard:      {}\n",
        f.id,
        shown(&f.kind),
        shorten_or_dash(f.payment_key().as_deref()),
        shorten_or_dash(f.order_id.as_deref()),
        shorten_or_dash(f.stripe_payment_intent_id.as_deref()),
        account_or_platform(f.stripe_account_id.as_deref()),
        shown(&f.local_status),
        shorten_or_dash(f.external_status.as_deref()),
        shown(&f.differs().phrase),
        shown(
            &f.details
                .as_ref()
                .map_or_else(|| "-".to_owned(), |d| d.to_string())
        ),
        f.detected_at.format("%Y-%m-%d %H:%M:%S"),
        shorten_or_dash(link),
    );
    out.push_str(&subscription_line(f));
    out.push_str("history:\n");
    for h in history {
        out.push_str(&format!(
            "  {}  finding {:<8} {:<9}  by {}{}{}\n",
            h.at.format("%Y-%m-%d %H:%M:%S"),
            h.finding_id,
            shown(&h.what),
            shorten_or_dash(h.who.as_deref()),
            h.resolution
                .as_deref()
                .map(|r| format!(" ({})", shown(r)))
                .unwrap_or_default(),
            h.note
                .as_deref()
                .map(|n| format!(": {}", shown(n)))
                .unwrap_or_default(),
        ));
    }
    out
}

/// The subscription a finding names (row key and `sub_…`); empty for a
/// payment's finding.
fn subscription_line(f: &FindingView) -> String {
    if f.subscription_id.is_none() && f.stripe_subscription_id.is_none() {
        return String::new();
    }
    format!(
        "subscription:   {} ({})\n",
        shorten_or_dash(f.subscription_id.as_deref()),
        shorten_or_dash(f.stripe_subscription_id.as_deref())
    )
}
