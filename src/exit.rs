//! Process exit codes (docs/design.md, "Exit codes"; the README's table).
//! The CronJob's `podFailurePolicy` relies on these numbers.

/// The command did what was asked. For `run`: the run completed. Findings are a business result, not a failure.
pub const SUCCESS: u8 = 0;
/// The run failed (database, Stripe down past the retry budget, interrupted).
pub const FAILURE: u8 = 1;
/// Another run holds the cursor (`EX_TEMPFAIL`); do not retry.
pub const CONCURRENT_RUN: u8 = 75;
/// Configuration error, including a key Stripe rejects (`EX_CONFIG`).
pub const CONFIG: u8 = 78;
/// The command line is wrong (clap's own code for usage errors; also an
/// empty `findings resolve --note`). Fix the command; retrying does not help.
pub const USAGE: u8 = 2;
/// The request was refused as asked (`EX_DATAERR`): `findings resolve` of a
/// finding that does not exist, is already resolved, or has a repair command
/// pending. Nothing changed; not a "retry later" failure.
pub const REFUSED: u8 = 65;
