//! The CSV of `findings list --csv`: the JSON's flat fields, `differs`
//! flattened, and an empty `note` to fill in for `resolve --file`.

use crate::dashboard::DashboardMode;
use crate::store::findings::FindingView;

/// The header of `findings list --csv`: the JSON's flat fields, `differs`
/// flattened, and an empty `note` to fill in for `resolve --file`.
pub const CSV_HEADER: [&str; 23] = [
    "id",
    "payment_id",
    "order_id",
    "stripe_payment_intent_id",
    "stripe_account_id",
    "kind",
    "local_status",
    "external_status",
    "detected_at",
    "resolved_at",
    "resolution",
    "resolved_by",
    "resolution_note",
    "details",
    "last_seen_at",
    "seconds_to_deadline",
    "dashboard_url",
    "differs_field",
    "differs_local",
    "differs_stripe",
    "subscription_id",
    "stripe_subscription_id",
    "note",
];

/// Writes `rows` to stdout as CSV, one header row first.
///
/// # Errors
/// [`csv::Error`] when stdout cannot be written.
pub(super) fn write(rows: &[FindingView], mode: DashboardMode) -> Result<(), csv::Error> {
    let mut out = csv::Writer::from_writer(std::io::stdout().lock());
    out.write_record(CSV_HEADER)?;
    for f in rows {
        out.write_record(record(f, mode))?;
    }
    out.flush()?;
    Ok(())
}

/// A text cell a spreadsheet must not run as a formula: one that starts with
/// `=`, `+`, `-`, `@`, a tab or a carriage return gets a leading `'` (OWASP,
/// "CSV Injection"). Order ids and notes are anyone's text.
fn cell(text: Option<&str>) -> String {
    match text {
        None => String::new(),
        Some(t) if t.starts_with(['=', '+', '-', '@', '\t', '\r']) => format!("'{t}"),
        Some(t) => t.to_owned(),
    }
}

/// The payment's key: a number (integer and numeric keys, JSON numbers)
/// as it is, so a spreadsheet keeps it a number (`-5` included); a text or
/// uuid key is anyone's text, escaped like every text cell ([`cell`]).
fn key_cell(f: &FindingView) -> String {
    match &f.payment_id {
        Some(serde_json::Value::Number(n)) => n.to_string(),
        _ => cell(f.payment_key().as_deref()),
    }
}

/// One finding as a CSV record, in [`CSV_HEADER`]'s order.
fn record(f: &FindingView, mode: DashboardMode) -> Vec<String> {
    let time =
        |t: Option<chrono::DateTime<chrono::Utc>>| t.map(|t| t.to_rfc3339()).unwrap_or_default();
    let d = f.differs();
    vec![
        f.id.to_string(),
        key_cell(f),
        cell(f.order_id.as_deref()),
        cell(f.stripe_payment_intent_id.as_deref()),
        cell(f.stripe_account_id.as_deref()),
        cell(Some(&f.kind)),
        cell(Some(&f.local_status)),
        cell(f.external_status.as_deref()),
        time(Some(f.detected_at)),
        time(f.resolved_at),
        cell(f.resolution.as_deref()),
        cell(f.resolved_by.as_deref()),
        cell(f.resolution_note.as_deref()),
        f.details
            .as_ref()
            .map(|d| cell(Some(&d.to_string())))
            .unwrap_or_default(),
        time(f.last_seen_at),
        f.seconds_to_deadline
            .map(|s| s.to_string())
            .unwrap_or_default(),
        f.dashboard_url(mode).unwrap_or_default(),
        cell(Some(&d.field)),
        cell(d.local.as_deref()),
        cell(d.stripe.as_deref()),
        cell(f.subscription_id.as_deref()),
        cell(f.stripe_subscription_id.as_deref()),
        String::new(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_key_is_escaped_and_a_number_stays_a_number() {
        let finding = |key: serde_json::Value| FindingView {
            id: 1,
            payment_id: Some(key),
            order_id: None,
            stripe_payment_intent_id: None,
            stripe_account_id: None,
            checkout_session_id: None,
            subscription_id: None,
            stripe_subscription_id: None,
            kind: "missing_externally".into(),
            local_status: "paid".into(),
            external_status: None,
            detected_at: chrono::Utc::now(),
            resolved_at: None,
            resolution: None,
            resolved_by: None,
            resolution_note: None,
            details: None,
            last_seen_at: None,
            seconds_to_deadline: None,
        };
        for (key, shown) in [
            (
                serde_json::json!("=cmd|' /C calc'!A0"),
                "'=cmd|' /C calc'!A0",
            ),
            (serde_json::json!("-1+1"), "'-1+1"),
            (serde_json::json!("@k13"), "'@k13"),
            (serde_json::json!("+"), "'+"),
            (serde_json::json!("\tk"), "'\tk"),
            (serde_json::json!("\rk"), "'\rk"),
            (serde_json::json!("pay_01H"), "pay_01H"),
            (serde_json::json!(-5), "-5"),
            (serde_json::json!(42), "42"),
        ] {
            assert_eq!(key_cell(&finding(key.clone())), shown, "{key}");
        }
    }

    #[test]
    fn csv_cells_never_start_a_formula() {
        assert_eq!(cell(Some("=HYPERLINK(\"x\")")), "'=HYPERLINK(\"x\")");
        assert_eq!(cell(Some("@SUM(A1)")), "'@SUM(A1)");
        assert_eq!(cell(Some("A-17")), "A-17");
        assert_eq!(
            CSV_HEADER.len(),
            CSV_HEADER
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len()
        );
    }
}
