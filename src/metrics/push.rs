//! The push to the Pushgateway: the text format PUT (or POSTed) with the async
//! client under a grouping key. The `prometheus` crate's own push uses
//! reqwest's blocking client, which panics inside tokio.

use std::time::Duration;

use url::Url;

/// Whole-push timeout: a dead or slow Pushgateway costs at most this.
pub const PUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// A push failed. The run's database work and exit code do not change; the
/// staleness alert (`StripeReconcilerNotRunning`) catches a gateway that never
/// receives figures.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// The figures could not be encoded.
    #[error("cannot encode metrics")]
    Encode(#[from] prometheus::Error),
    /// PUSHGATEWAY_URL cannot take the grouping key.
    #[error("PUSHGATEWAY_URL cannot be a base URL")]
    BadUrl,
    /// No answer, or an error status.
    #[error("Pushgateway push failed")]
    Http(#[source] reqwest::Error),
    /// No answer within [`PUSH_TIMEOUT`].
    #[error("Pushgateway push timed out")]
    Timeout,
}

/// How a push treats the figures already in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushMethod {
    /// HTTP PUT: the group becomes exactly these figures.
    Replace,
    /// HTTP POST: only metrics of the same names are replaced; the rest stay.
    Merge,
}

/// PUTs (or POSTs) figures to the Pushgateway under a grouping key.
pub struct Pusher {
    http: reqwest::Client,
    base: Url,
}

impl Pusher {
    /// A pusher for `PUSHGATEWAY_URL`.
    ///
    /// # Errors
    /// [`PushError::Http`] when the client cannot be built.
    pub fn new(base: Url) -> Result<Self, PushError> {
        let http = reqwest::Client::builder()
            .timeout(PUSH_TIMEOUT)
            .connect_timeout(Duration::from_secs(2))
            .build()
            .map_err(PushError::Http)?;
        Ok(Pusher { http, base })
    }

    /// Replaces the group `{base}/metrics/job/<job>[/<label>/<value>...]` with `body`.
    ///
    /// # Errors
    /// [`PushError`]; the caller logs it and carries on.
    pub async fn push(
        &self,
        job: &str,
        extra: &[(&str, &str)],
        method: PushMethod,
        body: String,
    ) -> Result<(), PushError> {
        let mut url = self.base.clone();
        {
            let mut segments = url.path_segments_mut().map_err(|()| PushError::BadUrl)?;
            segments.pop_if_empty().extend(["metrics", "job", job]);
            for (k, v) in extra {
                segments.extend([*k, *v]);
            }
        }
        let request = match method {
            PushMethod::Replace => self.http.put(url),
            PushMethod::Merge => self.http.post(url),
        };
        request
            .header(reqwest::header::CONTENT_TYPE, "text/plain; version=0.0.4")
            .body(body)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .map_err(|e| PushError::Http(e.without_url()))?;
        Ok(())
    }
}
