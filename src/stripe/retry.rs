//! The retry decision, a pure function of one attempt's outcome and the attempt
//! number, modelled on Stripe's official clients (stripe-node, stripe-python;
//! `shared/stripe/FACTS.md`): obey `Stripe-Should-Retry` when present; retry
//! connection errors, timeouts, 409 and 5xx; a 429 `lock_timeout` is retried;
//! a 429 rate limit is retried only after the shared limiter has been paused;
//! delay 0.5 s doubling to a 5 s cap, with jitter in [0.5, 1.0] and a 0.5 s floor.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

/// What one HTTP attempt ended with, as far as the retry rule cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// No response: connection refused/reset, DNS, TLS.
    Connection,
    /// No response within the request timeout.
    Timeout,
    /// A response with this status.
    Status {
        /// HTTP status code.
        status: u16,
        /// The `Stripe-Should-Retry` header, when present.
        should_retry: Option<bool>,
        /// The error envelope's `code` was `lock_timeout`.
        lock_timeout: bool,
    },
}

/// What to do after an attempt that did not succeed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryDecision {
    /// Try again after waiting this long.
    RetryAfter(Duration),
    /// Pause the shared rate limiter for this long, then try again
    /// (Stripe's rate limit was hit: everyone should slow down, not just us).
    BackOffAll(Duration),
    /// Stop: the outcome is final.
    GiveUp,
}

/// The retry budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts including the first (Stripe's clients: 1 + 2 retries).
    pub max_attempts: u32,
    /// First delay (0.5 s).
    pub initial_delay: Duration,
    /// Cap on any delay (5 s).
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 3,
            initial_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// Decides what follows attempt number `attempt` (1-based) that ended with
    /// `outcome`. `jitter` is a number in `[0.0, 1.0)` supplied by the caller
    /// (random in production, fixed in tests) so this function stays pure.
    pub fn decide(&self, outcome: AttemptOutcome, attempt: u32, jitter: f64) -> RetryDecision {
        if attempt >= self.max_attempts {
            return RetryDecision::GiveUp;
        }
        let delay = self.delay(attempt, jitter);
        match outcome {
            AttemptOutcome::Connection | AttemptOutcome::Timeout => {
                RetryDecision::RetryAfter(delay)
            }
            AttemptOutcome::Status {
                should_retry: Some(false),
                ..
            } => RetryDecision::GiveUp,
            AttemptOutcome::Status {
                status: 429,
                lock_timeout: true,
                ..
            } => RetryDecision::RetryAfter(delay),
            AttemptOutcome::Status { status: 429, .. } => {
                RetryDecision::BackOffAll(delay.max(Duration::from_secs(1)))
            }
            AttemptOutcome::Status {
                should_retry: Some(true),
                ..
            } => RetryDecision::RetryAfter(delay),
            AttemptOutcome::Status { status, .. } if status == 409 || status >= 500 => {
                RetryDecision::RetryAfter(delay)
            }
            AttemptOutcome::Status { .. } => RetryDecision::GiveUp,
        }
    }

    /// `initial * 2^(attempt-1)`, capped, times a jitter factor in [0.5, 1.0],
    /// never below `initial`.
    fn delay(&self, attempt: u32, jitter: f64) -> Duration {
        let exp = self
            .initial_delay
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(16))
            .min(self.max_delay);
        let factor = 0.5 + 0.5 * jitter.clamp(0.0, 1.0);
        exp.mul_f64(factor).max(self.initial_delay)
    }
}

/// One attempt's result, as the retry loop sees it.
#[derive(Debug)]
pub enum Attempt<T, E> {
    /// Success, or a failure no retry can fix: stop here.
    Done(Result<T, E>),
    /// A failure the policy may retry.
    Retry(AttemptOutcome, E),
}

/// Runs `attempt` under `policy` until it is done or the policy gives up, and
/// returns the last result with the number of attempts made. On a 429 rate
/// limit it calls `pause_all` (the caller's next attempt must wait for the
/// pause) instead of sleeping itself. It never waits past `deadline`: a retry
/// that would end after it is not made.
pub async fn execute<T, E, F, Fut>(
    policy: &RetryPolicy,
    deadline: Option<Instant>,
    mut attempt: F,
    mut pause_all: impl FnMut(Duration),
) -> (Result<T, E>, u32)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Attempt<T, E>>,
{
    let mut made = 0;
    loop {
        made += 1;
        let (outcome, error) = match attempt().await {
            Attempt::Done(result) => return (result, made),
            Attempt::Retry(outcome, error) => (outcome, error),
        };
        let decision = policy.decide(outcome, made, fastrand::f64());
        let wait = match decision {
            RetryDecision::GiveUp => return (Err(error), made),
            RetryDecision::RetryAfter(wait) | RetryDecision::BackOffAll(wait) => wait,
        };
        if deadline.is_some_and(|d| Instant::now() + wait > d) {
            tracing::debug!(
                attempt = made,
                "no retry: it would end after the run's deadline"
            );
            return (Err(error), made);
        }
        if let RetryDecision::BackOffAll(wait) = decision {
            tracing::warn!(
                attempt = made,
                ?wait,
                "Stripe rate limit hit; pausing every read of the run"
            );
            pause_all(wait);
        } else {
            tracing::debug!(attempt = made, ?wait, ?outcome, "retrying");
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AttemptOutcome::*;
    use RetryDecision::*;

    fn status(status: u16) -> AttemptOutcome {
        Status {
            status,
            should_retry: None,
            lock_timeout: false,
        }
    }

    #[test]
    fn the_rules() {
        let p = RetryPolicy::default();
        let ms = Duration::from_millis;
        let cases = [
            (Connection, 1, RetryAfter(ms(500))),
            (Timeout, 1, RetryAfter(ms(500))),
            (status(500), 1, RetryAfter(ms(500))),
            (status(503), 2, RetryAfter(ms(500))),
            (status(409), 1, RetryAfter(ms(500))),
            (status(400), 1, GiveUp),
            (status(404), 1, GiveUp),
            (status(401), 1, GiveUp),
            (
                Status {
                    status: 500,
                    should_retry: Some(false),
                    lock_timeout: false,
                },
                1,
                GiveUp,
            ),
            (
                Status {
                    status: 400,
                    should_retry: Some(true),
                    lock_timeout: false,
                },
                1,
                RetryAfter(ms(500)),
            ),
            (
                Status {
                    status: 429,
                    should_retry: None,
                    lock_timeout: true,
                },
                1,
                RetryAfter(ms(500)),
            ),
            (status(429), 1, BackOffAll(ms(1000))),
            (
                Status {
                    status: 429,
                    should_retry: Some(false),
                    lock_timeout: false,
                },
                1,
                GiveUp,
            ),
            (status(500), 3, GiveUp),
            (Connection, 3, GiveUp),
        ];
        for (outcome, attempt, expected) in cases {
            assert_eq!(
                p.decide(outcome, attempt, 0.0),
                expected,
                "{outcome:?} attempt {attempt}"
            );
        }
    }

    #[test]
    fn delays_double_to_the_cap_with_jitter_and_floor() {
        let p = RetryPolicy {
            max_attempts: 10,
            ..RetryPolicy::default()
        };
        let d = |attempt, jitter| match p.decide(Connection, attempt, jitter) {
            RetryAfter(d) => d.as_millis(),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            [
                d(1, 0.999_999),
                d(2, 0.999_999),
                d(3, 0.999_999),
                d(4, 0.999_999),
                d(5, 0.999_999)
            ],
            [500, 999, 1999, 3999, 4999]
        );
        assert_eq!(d(9, 0.0), 2500);
        assert_eq!(d(1, 0.0), 500, "floor");
    }

    /// Scripted outcomes for `execute`, on tokio's paused clock.
    async fn script(
        steps: &[Option<AttemptOutcome>],
        deadline: Option<Duration>,
    ) -> (bool, u32, Duration, Vec<Duration>) {
        let policy = RetryPolicy::default();
        let start = Instant::now();
        let mut steps = steps.iter().copied();
        let mut pauses = Vec::new();
        let (result, attempts) = execute(
            &policy,
            deadline.map(|d| start + d),
            || {
                let step = steps.next().flatten();
                async move {
                    match step {
                        None => Attempt::Done(Ok::<(), &str>(())),
                        Some(outcome) => Attempt::Retry(outcome, "failed"),
                    }
                }
            },
            |d| pauses.push(d),
        )
        .await;
        (result.is_ok(), attempts, start.elapsed(), pauses)
    }

    fn s(status: u16, should_retry: Option<bool>, lock_timeout: bool) -> Option<AttemptOutcome> {
        Some(Status {
            status,
            should_retry,
            lock_timeout,
        })
    }

    #[tokio::test(start_paused = true)]
    async fn retried_outcomes_take_three_attempts_with_backoff() {
        for outcome in [
            Some(Connection),
            Some(Timeout),
            s(500, None, false),
            s(503, None, false),
            s(409, None, false),
            s(429, None, true),
            s(400, Some(true), false),
        ] {
            let (ok, attempts, elapsed, _) = script(&[outcome, outcome, outcome], None).await;
            assert!(!ok, "{outcome:?}");
            assert_eq!(attempts, 3, "{outcome:?}");
            // 0.5 s, then 0.5 to 1.0 s (jitter), on the paused clock.
            assert!(
                elapsed >= Duration::from_millis(1000) && elapsed <= Duration::from_millis(1500),
                "{outcome:?}: {elapsed:?}"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_transient_failure_then_success_succeeds() {
        let (ok, attempts, elapsed, _) = script(&[s(503, None, false), None], None).await;
        assert!(ok);
        assert_eq!(attempts, 2);
        assert_eq!(elapsed, Duration::from_millis(500));
    }

    #[tokio::test(start_paused = true)]
    async fn final_outcomes_take_one_attempt() {
        for outcome in [
            s(500, Some(false), false),
            s(400, None, false),
            s(404, None, false),
            s(429, Some(false), false),
        ] {
            let (ok, attempts, elapsed, _) = script(&[outcome], None).await;
            assert!(!ok);
            assert_eq!(attempts, 1, "{outcome:?}");
            assert_eq!(elapsed, Duration::ZERO);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_limit_pauses_every_read_instead_of_sleeping_alone() {
        let limited = s(429, None, false);
        let (ok, attempts, elapsed, pauses) = script(&[limited, limited, limited], None).await;
        assert!(!ok);
        assert_eq!(attempts, 3);
        assert_eq!(
            elapsed,
            Duration::ZERO,
            "the pause is the shared limiter's, not this read's"
        );
        assert_eq!(pauses.len(), 2);
        assert!(
            pauses.iter().all(|p| *p >= Duration::from_secs(1)),
            "{pauses:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn no_retry_ends_after_the_deadline() {
        let (ok, attempts, elapsed, _) = script(
            &[s(503, None, false), s(503, None, false)],
            Some(Duration::from_millis(300)),
        )
        .await;
        assert!(!ok);
        assert_eq!(
            attempts, 1,
            "a 0.5 s backoff would end past a 0.3 s deadline"
        );
        assert_eq!(elapsed, Duration::ZERO);
    }
}
