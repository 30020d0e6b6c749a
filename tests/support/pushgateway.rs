//! A real Pushgateway (Debian's `prometheus-pushgateway`, installed by
//! scripts/test.sh), one per test on a free port, with persistence off:
//! Debian's default `--persistence.file` would load every group anything else
//! on the machine ever pushed (an earlier demo, another tool), and a test must
//! pass or fail on its own pushes only.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct Pushgateway {
    child: Child,
    pub url: String,
}

impl Drop for Pushgateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub async fn start() -> Pushgateway {
    let bin = std::env::var("PUSHGATEWAY_BIN").unwrap_or_else(|_| "prometheus-pushgateway".into());
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = Command::new(&bin)
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        // Empty: metrics are only kept in memory (`--help` of the binary).
        .arg("--persistence.file=")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin} ({e}); scripts/test.sh installs it (apt-get install prometheus-pushgateway)"));
    let gw = Pushgateway {
        child,
        url: format!("http://127.0.0.1:{port}"),
    };
    for _ in 0..100 {
        if let Ok(r) = reqwest::get(format!("{}/-/ready", gw.url)).await {
            if r.status().is_success() {
                return gw;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the Pushgateway at {} did not become ready", gw.url);
}

impl Pushgateway {
    /// The gateway's own `/metrics` page, as Prometheus would scrape it.
    pub async fn scrape(&self) -> String {
        reqwest::get(format!("{}/metrics", self.url))
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

/// The value of the sample `name{labels...}` in a text exposition, if any.
/// `labels` must include the grouping key's `job`: a Pushgateway holds every
/// group pushed to it, and a lookup that does not name its job could read
/// another job's figures. Other labels of the sample (`instance`) may exist.
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    assert!(
        labels.iter().any(|(k, _)| *k == "job"),
        "select {name} by its job (the grouping key), not by name alone: {labels:?}"
    );
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(parse_sample)
        .find(|(n, sample_labels, _)| {
            n == name
                && labels
                    .iter()
                    .all(|(k, v)| sample_labels.iter().any(|(sk, sv)| sk == k && sv == v))
        })
        .map(|(_, _, v)| v)
}

/// A sample: metric name, labels, value.
type Sample = (String, Vec<(String, String)>, f64);

/// `name{k="v",...} value` -> (name, labels, value). Label values in these
/// tests have no escaped quotes or commas.
fn parse_sample(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse().ok()?;
    let Some((name, rest)) = series.split_once('{') else {
        return Some((series.to_owned(), Vec::new(), value));
    };
    let labels = rest
        .trim_end_matches('}')
        .split(',')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let (k, v) = p.split_once('=')?;
            Some((k.to_owned(), v.trim_matches('"').to_owned()))
        })
        .collect();
    Some((name.to_owned(), labels, value))
}
