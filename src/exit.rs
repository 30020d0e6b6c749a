//! Process exit codes (DESIGN.md, Interface). The CronJob's `podFailurePolicy`
//! relies on these numbers.

/// The run completed. Findings are a business result, not a failure.
pub const SUCCESS: u8 = 0;
/// The run failed (database, Stripe down past the retry budget, interrupted).
pub const FAILURE: u8 = 1;
/// Another run holds the cursor (`EX_TEMPFAIL`); do not retry.
pub const CONCURRENT_RUN: u8 = 75;
/// Configuration error, including a key Stripe rejects (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
