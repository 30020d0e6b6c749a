//! A real Pushgateway (Debian's `prometheus-pushgateway`, installed by
//! scripts/test.sh), one per test on a free port.

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
pub fn value(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
