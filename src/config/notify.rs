//! Notifications of new findings (docs/review.md, "Notifications"):
//! `RECONCILER_NOTIFY_URL`, `RECONCILER_NOTIFY_FORMAT`, `RECONCILER_NOTIFY_KINDS`.

use secrecy::SecretString;
use serde::Deserialize;
use url::{Host, Url};

use super::error::{invalid, ConfigError};
use super::value;
use crate::reconcile::FindingKind;

/// The body a notification is posted as (`RECONCILER_NOTIFY_FORMAT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotifyFormat {
    /// Slack's incoming webhook: `{"text": …}`, with Slack's escaping of
    /// `&`, `<` and `>` (the default).
    Slack,
    /// `{"findings": [...]}`, one object per finding.
    Json,
}

/// Which findings are posted (`RECONCILER_NOTIFY_KINDS`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotifyKinds {
    /// Money at risk ([`FindingKind::is_money`]; the default).
    Money,
    /// Every kind no machine may repair: all but the kinds a repair command
    /// repairs (`missed_success`, `missed_cancel`).
    Review,
    /// These kinds (database names).
    Listed(Vec<String>),
}

impl NotifyKinds {
    /// The kinds as a `text[]` and whether the list is excluded (`Review`:
    /// every kind but the repairable ones, `unexpected:…` included).
    pub fn filter(&self) -> (Vec<String>, bool) {
        match self {
            Self::Money => (
                FindingKind::money_kinds()
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                false,
            ),
            Self::Review => (
                crate::reconcile::RepairCommand::ALL
                    .iter()
                    .map(|c| c.finding_kind().as_str().into_owned())
                    .collect(),
                true,
            ),
            Self::Listed(kinds) => (kinds.clone(), false),
        }
    }
}

/// Where and how new findings are posted. `Debug` never shows the URL.
#[derive(Clone)]
pub struct NotifySettings {
    /// The webhook (Slack's URL carries its credential in the path: a
    /// secret, never logged or printed).
    pub url: SecretString,
    /// The body's shape.
    pub format: NotifyFormat,
    /// Which findings.
    pub kinds: NotifyKinds,
}

impl std::fmt::Debug for NotifySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotifySettings")
            .field("url", &"[redacted]")
            .field("format", &self.format)
            .field("kinds", &self.kinds)
            .finish()
    }
}

impl PartialEq for NotifySettings {
    fn eq(&self, other: &Self) -> bool {
        use secrecy::ExposeSecret;
        self.url.expose_secret() == other.url.expose_secret()
            && self.format == other.format
            && self.kinds == other.kinds
    }
}

#[derive(Deserialize)]
struct NotifyVars {
    reconciler_notify_url: Option<String>,
    reconciler_notify_format: Option<String>,
    reconciler_notify_kinds: Option<String>,
}

const URL_VAR: &str = "RECONCILER_NOTIFY_URL";

/// Whether `url` may carry findings: `https`, or `http` to a loopback
/// address (a local receiver or sidecar).
fn allowed(url: &Url) -> bool {
    match (url.scheme(), url.host()) {
        ("https", Some(_)) => true,
        ("http", Some(Host::Domain(d))) => d.eq_ignore_ascii_case("localhost"),
        ("http", Some(Host::Ipv4(ip))) => ip.is_loopback(),
        ("http", Some(Host::Ipv6(ip))) => ip.is_loopback(),
        _ => false,
    }
}

/// Parses the group: `None` when `RECONCILER_NOTIFY_URL` is unset or blank.
///
/// # Errors
/// [`ConfigError`] naming the variable: a URL that is not `https` (or `http`
/// to loopback), a format other than `slack`/`json`, an unknown kind. The
/// URL itself is never part of a message.
pub(super) fn parse<I>(vars: I) -> Result<Option<NotifySettings>, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: NotifyVars = value::read(None, vars)?;
    let format = match raw.reconciler_notify_format.as_deref().map(str::trim) {
        None | Some("") | Some("slack") => NotifyFormat::Slack,
        Some("json") => NotifyFormat::Json,
        Some(_) => return Err(invalid("RECONCILER_NOTIFY_FORMAT", "must be slack or json")),
    };
    let kinds = match raw.reconciler_notify_kinds.as_deref().map(str::trim) {
        None | Some("") | Some("money") => NotifyKinds::Money,
        Some("review") => NotifyKinds::Review,
        Some(list) => {
            let mut kinds = Vec::new();
            for kind in list.split(',').map(str::trim).filter(|k| !k.is_empty()) {
                if !FindingKind::ALL
                    .iter()
                    .any(|k| k.fixed_name() == Some(kind))
                {
                    return Err(invalid(
                        "RECONCILER_NOTIFY_KINDS",
                        format!(
                            "{kind:?} is not a finding kind (money, review, or a comma list of kinds such as refunded,disputed)"
                        ),
                    ));
                }
                kinds.push(kind.to_owned());
            }
            if kinds.is_empty() {
                // `,` or `, ,`: a list that names nothing would silently
                // notify nothing.
                return Err(invalid(
                    "RECONCILER_NOTIFY_KINDS",
                    "names no finding kind (money, review, or a comma list of kinds such as refunded,disputed)",
                ));
            }
            NotifyKinds::Listed(kinds)
        }
    };
    let Some(text) = raw.reconciler_notify_url.filter(|u| !u.trim().is_empty()) else {
        return Ok(None);
    };
    let url = Url::parse(text.trim())
        .map_err(|e| invalid(URL_VAR, format!("not a URL ({e}); the value is not shown")))?;
    if !allowed(&url) {
        return Err(invalid(
            URL_VAR,
            "must be an https:// URL (http:// only to a loopback address); the value is not shown",
        ));
    }
    Ok(Some(NotifySettings {
        url: SecretString::from(url.to_string()),
        format,
        kinds,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_pairs(pairs: &[(&str, &str)]) -> Result<Option<NotifySettings>, ConfigError> {
        parse(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
    }

    #[test]
    fn https_or_loopback_only_and_the_url_never_in_a_message() {
        assert_eq!(parse_pairs(&[]).unwrap(), None);
        let s = parse_pairs(&[(URL_VAR, "https://hooks.slack.com/services/T0/B0/sekret")])
            .unwrap()
            .unwrap();
        assert_eq!(
            (s.format, s.kinds.clone()),
            (NotifyFormat::Slack, NotifyKinds::Money)
        );
        assert!(!format!("{s:?}").contains("sekret"));
        for ok in [
            "http://127.0.0.1:9/x",
            "http://localhost/x",
            "http://[::1]:8/x",
        ] {
            assert!(parse_pairs(&[(URL_VAR, ok)]).unwrap().is_some(), "{ok}");
        }
        for bad in [
            "http://hooks.example.com/sekret",
            "ftp://127.0.0.1/sekret",
            "sekret",
        ] {
            let e = parse_pairs(&[(URL_VAR, bad)]).unwrap_err();
            assert!(e.to_string().contains(URL_VAR), "{e}");
            assert!(!e.to_string().contains("sekret"), "{e}");
        }
    }

    #[test]
    fn formats_and_kinds() {
        let url = (URL_VAR, "https://example.com/hook");
        let s = parse_pairs(&[
            url,
            ("RECONCILER_NOTIFY_FORMAT", "json"),
            ("RECONCILER_NOTIFY_KINDS", "review"),
        ])
        .unwrap()
        .unwrap();
        assert_eq!(
            (s.format, s.kinds.clone()),
            (NotifyFormat::Json, NotifyKinds::Review)
        );
        assert_eq!(
            s.kinds.filter(),
            (
                vec!["missed_success".to_owned(), "missed_cancel".to_owned()],
                true
            )
        );
        let s = parse_pairs(&[url, ("RECONCILER_NOTIFY_KINDS", "refunded, disputed")])
            .unwrap()
            .unwrap();
        assert_eq!(
            s.kinds,
            NotifyKinds::Listed(vec!["refunded".into(), "disputed".into()])
        );
        assert!(
            parse_pairs(&[url, ("RECONCILER_NOTIFY_KINDS", "refunded,nope")])
                .unwrap_err()
                .to_string()
                .contains("RECONCILER_NOTIFY_KINDS")
        );
        for nothing in [",", " , ,"] {
            assert!(
                parse_pairs(&[url, ("RECONCILER_NOTIFY_KINDS", nothing)])
                    .unwrap_err()
                    .to_string()
                    .contains("names no finding kind"),
                "{nothing:?} must be refused"
            );
        }
        assert!(parse_pairs(&[url, ("RECONCILER_NOTIFY_FORMAT", "xml")])
            .unwrap_err()
            .to_string()
            .contains("RECONCILER_NOTIFY_FORMAT"));
    }
}
