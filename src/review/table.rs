//! The table of `findings list`: one line per finding, every stored string
//! escaped ([`crate::terminal`]), so `--json` is the only exact form.

use crate::store::findings::FindingView;
use crate::terminal::{account_or_platform, human_duration, shorten_or_dash, shown};

/// The table's header and one line per finding; `link` gives a finding's
/// Dashboard link.
pub(super) fn render(
    rows: &[FindingView],
    link: &dyn Fn(&FindingView) -> Option<String>,
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
            // A subscription finding names its row and its `sub_…` there.
            shorten_or_dash(f.payment_key().or_else(|| f.subscription_id.clone()).as_deref()),
            shorten_or_dash(f.order_id.as_deref()),
            shorten_or_dash(
                f.stripe_payment_intent_id
                    .as_deref()
                    .or(f.stripe_subscription_id.as_deref())
            ),
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
fn details(f: &FindingView) -> String {
    let deadline = f.seconds_to_deadline.map(|s| {
        if s >= 0.0 {
            format!("deadline in {}; ", human_duration(s))
        } else {
            format!("deadline passed {} ago; ", human_duration(-s))
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
