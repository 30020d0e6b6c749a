//! Notifications of new findings a person must see (docs/review.md,
//! "Notifications"): after each `run` and `events`, one message to
//! `RECONCILER_NOTIFY_URL` lists the open findings of `RECONCILER_NOTIFY_KINDS`
//! not yet posted, with order, amount, kind, what differs and the Dashboard
//! link, as Slack's `{"text": …}` or as JSON (`RECONCILER_NOTIFY_FORMAT`).
//!
//! Each finding is posted once: it is claimed in `reconciliation_notified`
//! in the transaction around the post, committed when the receiver answers
//! 2xx and rolled back otherwise, so a failed post (timeout, refused, 5xx) is
//! retried by the next run. A notification never fails the run and never
//! holds it more than [`BUDGET`]; failures are logged (never with the URL)
//! and counted in `stripe_reconciler_notify_failures`.

use std::time::Duration;

use secrecy::ExposeSecret;
use sqlx::PgPool;
use url::Url;

use crate::config::{NotifyFormat, NotifySettings};
use crate::dashboard::DashboardMode;
use crate::reconcile::money;
use crate::store::findings::{self, FindingView};
use crate::store::Context;
use crate::terminal::shown;

/// The most findings one message lists; more wait for the next run.
pub const MAX_PER_MESSAGE: i64 = 50;

/// The receiver's time to answer.
pub const POST_TIMEOUT: Duration = Duration::from_secs(5);

/// The most a notification may add to a run.
pub const BUDGET: Duration = Duration::from_secs(8);

/// Why a notification was not delivered (logged, counted; never fails the run).
#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    /// Reading or claiming the findings failed.
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    /// The post failed: no answer, refused, or not 2xx (the error carries no URL).
    #[error("the notification could not be posted: {0}")]
    Post(reqwest::Error),
    /// The receiver answered, but not with a 2xx (e.g. a redirect, which is
    /// not followed): its HTTP status.
    #[error("the notification receiver answered HTTP {0}, not 2xx")]
    NotDelivered(u16),
    /// [`BUDGET`] ran out.
    #[error("the notification took longer than {0:?}")]
    Timeout(Duration),
}

/// THE entry point, called once at the end of `run` and of `events`: posts
/// the new findings, if `RECONCILER_NOTIFY_URL` is set, and pushes
/// `notify_sent` / `notify_failures` to `job=<group>-notify` on
/// `pushgateway` (`RECONCILER_PUSHGATEWAY_URL`, if set). Links open the
/// Dashboard in `mode`. Never fails.
pub async fn after_run(
    notify: Option<&NotifySettings>,
    mode: DashboardMode,
    pushgateway: Option<&Url>,
    pool: &PgPool,
    group: &str,
) {
    let Some(notify) = notify else {
        return;
    };
    let (sent, failures) = match tokio::time::timeout(BUDGET, deliver(notify, pool, group, mode))
        .await
    {
        Ok(Ok(sent)) => {
            if sent > 0 {
                tracing::info!(findings = sent, "new findings notified");
            }
            (sent, 0)
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "cannot notify the new findings; the next run tries again");
            (0, 1)
        }
        Err(_) => {
            tracing::warn!(error = %NotifyError::Timeout(BUDGET), "cannot notify the new findings; the next run tries again");
            (0, 1)
        }
    };
    push(pushgateway, group, sent, failures).await;
}

/// Claims, posts and commits; returns how many findings were posted.
async fn deliver(
    notify: &NotifySettings,
    pool: &PgPool,
    group: &str,
    mode: DashboardMode,
) -> Result<u64, NotifyError> {
    let mut tx = crate::store::begin(pool).await.context("connecting")?;
    let (kinds, exclude) = notify.kinds.filter();
    let candidates = findings::not_notified(&mut tx, &kinds, exclude, MAX_PER_MESSAGE).await?;
    if candidates.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = candidates.iter().map(|f| f.id).collect();
    let claimed = findings::mark_notified(&mut tx, &ids).await?;
    let batch: Vec<&FindingView> = candidates
        .iter()
        .filter(|f| claimed.contains(&f.id))
        .collect();
    if batch.is_empty() {
        return Ok(0);
    }
    let body = match notify.format {
        NotifyFormat::Slack => slack_body(&batch, group, mode),
        NotifyFormat::Json => json_body(&batch, group, mode),
    };
    let client = reqwest::Client::builder()
        .timeout(POST_TIMEOUT)
        .connect_timeout(Duration::from_secs(2))
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| NotifyError::Post(e.without_url()))?;
    let answer = client
        .post(notify.url.expose_secret())
        .json(&body)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .map_err(|e| NotifyError::Post(e.without_url()))?;
    // Redirects are not followed, and a 3xx (or any other non-2xx) is not
    // a delivery: the findings wait for the next run.
    if !answer.status().is_success() {
        return Err(NotifyError::NotDelivered(answer.status().as_u16()));
    }
    tx.commit()
        .await
        .context("recording the findings notified")?;
    Ok(batch.len() as u64)
}

/// Slack's escaping of message text: `&`, `<` and `>` become entities, so
/// stored text cannot mention (`<!channel>`) or forge a link (`<url|text>`)
/// (Slack, "Formatting text for app surfaces", escaping). Controls and
/// line breaks are escaped first and a value over
/// [`crate::terminal::SHOWN_CHARS`] characters is cut
/// ([`crate::terminal::shown`]): one finding is one short line, so a 1 MB
/// `order_id` cannot push the message past Slack's size limit.
/// The JSON format ([`json_body`]) carries the exact stored values.
pub fn slack_escape(text: &str) -> String {
    shown(text)
        .replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// The money a finding is about, in major units (`19.99 USD`), if its
/// details say: Stripe's amount first.
pub fn amount(f: &FindingView) -> Option<String> {
    let d = f.details.as_ref()?;
    let currency = d.get("currency").and_then(|c| c.as_str());
    ["stripe_amount", "amount_received", "amount", "local_amount"]
        .iter()
        .find_map(|k| d.get(*k).and_then(serde_json::Value::as_i64))
        .map(|minor| money(minor, currency))
}

/// `{"text": …}`: a title, then one line per finding.
pub fn slack_body(batch: &[&FindingView], group: &str, mode: DashboardMode) -> serde_json::Value {
    let mut text = format!(
        "{} new finding(s) need a person ({})",
        batch.len(),
        slack_escape(group)
    );
    for f in batch {
        let order = f.order_id.as_deref().map_or_else(
            || "no order".to_owned(),
            |o| format!("order {}", slack_escape(o)),
        );
        text.push_str(&format!(
            "\n• {order} · {} · {} · {}",
            amount(f).map_or_else(|| "-".to_owned(), |a| slack_escape(&a)),
            slack_escape(&f.kind),
            slack_escape(&f.differs().phrase),
        ));
        // The link is built from a validated PaymentIntent id and account.
        if let Some(url) = f.dashboard_url(mode) {
            text.push_str(&format!(" · <{url}|Dashboard>"));
        }
    }
    serde_json::json!({ "text": text })
}

/// `{"source", "group", "findings": [...]}`, the exact stored values.
pub fn json_body(batch: &[&FindingView], group: &str, mode: DashboardMode) -> serde_json::Value {
    let findings: Vec<serde_json::Value> = batch
        .iter()
        .map(|f| {
            serde_json::json!({
                "id": f.id,
                "kind": f.kind,
                "order_id": f.order_id,
                "payment_id": f.payment_id,
                "stripe_payment_intent_id": f.stripe_payment_intent_id,
                "stripe_account_id": f.stripe_account_id,
                "amount": amount(f),
                "differs": f.differs(),
                "dashboard_url": f.dashboard_url(mode),
                "detected_at": f.detected_at,
            })
        })
        .collect();
    serde_json::json!({ "source": "stripe-reconciler", "group": group, "findings": findings })
}

async fn push(pushgateway: Option<&Url>, group: &str, sent: u64, failures: u64) {
    let Some(base) = pushgateway.cloned() else {
        return;
    };
    let figures = match crate::metrics::NotifyMetrics::new() {
        Ok(m) => m,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the notification metrics");
            return;
        }
    };
    figures.observe(sent, failures);
    let pushed = match (
        figures.figures().encode(),
        crate::metrics::Pusher::new(base),
    ) {
        (Ok(body), Ok(pusher)) => {
            let job = format!("{group}-notify");
            tokio::time::timeout(
                crate::metrics::PUSH_TIMEOUT,
                pusher.push(&job, &[], crate::metrics::PushMethod::Replace, body),
            )
            .await
            .unwrap_or(Err(crate::metrics::PushError::Timeout))
        }
        (Err(e), _) => Err(e.into()),
        (_, Err(e)) => Err(e),
    };
    if let Err(e) = pushed {
        tracing::error!(error = %e, "cannot push the notification metrics");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slack_text_cannot_mention_or_link() {
        assert_eq!(
            slack_escape("<!channel> & <https://evil|click>\nnext"),
            "&lt;!channel&gt; &amp; &lt;https://evil|click&gt;\\nnext"
        );
    }

    #[test]
    fn slack_text_cuts_a_huge_stored_value() {
        let huge = format!("<{}", "o".repeat(1_048_575));
        let text = slack_escape(&huge);
        assert!(text.starts_with("&lt;ooo"));
        assert!(text.ends_with("…(1048576 chars)"));
        assert!(text.chars().count() < 250, "{} chars", text.chars().count());
    }
}
