//! The in-process Stripe stand-in of scenarios 1 to 4 and its arrival-time arithmetic.

use super::common::*;

/// Answers every PaymentIntent read with the fixture, the requested id and
/// `succeeded`, after `latency`; records each request's arrival.
pub(crate) struct Standin {
    pub(crate) body_head: String,
    pub(crate) body_tail: String,
    pub(crate) latency: Duration,
    pub(crate) arrivals: Arc<Mutex<Vec<Instant>>>,
    pub(crate) served: AtomicU64,
}

impl Respond for Standin {
    fn respond(&self, request: &Request) -> ResponseTemplate {
        let arrived = Instant::now();
        self.arrivals
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(arrived);
        let n = self.served.fetch_add(1, Ordering::Relaxed);
        let id = request.url.path().rsplit('/').next().unwrap_or_default();
        let id_json = serde_json::to_string(id).unwrap_or_else(|_| "\"\"".into());
        let body = format!("{}{id_json}{}", self.body_head, self.body_tail);
        let template = ResponseTemplate::new(200)
            .insert_header("Request-Id", format!("req_bench{n:012}").as_str())
            .set_body_raw(body, "application/json");
        if self.latency.is_zero() {
            template
        } else {
            template.set_delay(self.latency)
        }
    }
}

pub(crate) struct StripeStandin {
    pub(crate) server: MockServer,
    pub(crate) arrivals: Arc<Mutex<Vec<Instant>>>,
}

impl StripeStandin {
    pub(crate) async fn start(latency: Duration) -> anyhow::Result<Self> {
        const MARK: &str = "__BENCH_PAYMENT_INTENT_ID__";
        let mut pi: Value = serde_json::from_str(FIXTURE).context("the fixture")?;
        pi["id"] = Value::from(MARK);
        pi["status"] = Value::from("succeeded");
        // Its latest charge, expanded: captured whole, nothing refunded or
        // disputed (a succeeded PaymentIntent without one is UNVERIFIABLE).
        pi["latest_charge"] = serde_json::json!({
            "id": "ch_bench", "object": "charge", "amount": 1099, "amount_captured": 1099,
            "amount_refunded": 0, "captured": true, "currency": "usd", "disputed": false,
            "paid": true, "refunded": false, "status": "succeeded",
        });
        let text = serde_json::to_string(&pi)?;
        let (head, tail) = text
            .split_once(&format!("\"{MARK}\""))
            .context("fixture template")?;
        let arrivals = Arc::new(Mutex::new(Vec::with_capacity(200_000)));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("binding a port")?;
        let server = MockServer::builder()
            .listener(listener)
            .disable_request_recording()
            .start()
            .await;
        Mock::given(method("GET"))
            .and(path_regex("^/v1/payment_intents/[^/]+$"))
            .respond_with(Standin {
                body_head: head.to_owned(),
                body_tail: tail.to_owned(),
                latency,
                arrivals: Arc::clone(&arrivals),
                served: AtomicU64::new(0),
            })
            .mount(&server)
            .await;
        Ok(StripeStandin { server, arrivals })
    }

    pub(crate) fn uri(&self) -> String {
        self.server.uri()
    }

    /// Takes the arrival times recorded so far, sorted.
    pub(crate) fn take_arrivals(&self) -> Vec<Instant> {
        let mut a = std::mem::take(&mut *self.arrivals.lock().unwrap_or_else(|p| p.into_inner()));
        a.sort_unstable();
        a
    }
}

/// Most arrivals in any half-open window `[t, t + width)`. With every response
/// delayed by exactly `width`, this is also the peak number of requests in
/// flight at the stand-in (intervals `[arrival, arrival + width)`).
pub(crate) fn max_in_window(sorted: &[Instant], width: Duration) -> usize {
    let mut best = 0;
    let mut start = 0;
    for (end, t) in sorted.iter().enumerate() {
        while *t - sorted[start] >= width {
            start += 1;
        }
        best = best.max(end - start + 1);
    }
    best
}

/// Shortest time spanned by `n` consecutive arrivals (an `n`-th request
/// inside one second of the first breaks a limit of `n - 1` per second).
pub(crate) fn min_span(sorted: &[Instant], n: usize) -> Option<Duration> {
    if n < 2 {
        return None;
    }
    sorted.windows(n).map(|w| w[n - 1] - w[0]).min()
}

/// Smallest gap between two consecutive arrivals.
pub(crate) fn min_gap(sorted: &[Instant]) -> Option<Duration> {
    sorted.windows(2).map(|w| w[1] - w[0]).min()
}
