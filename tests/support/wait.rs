//! Waiting for another process's state instead of sleeping a fixed time:
//! each helper polls what a user could see (the test database's
//! `pg_stat_activity` and `pg_locks`, the requests a wiremock Stripe
//! received) and fails the test after [`PATIENCE`], so a slow machine makes
//! a test slower, never wrong, and a stuck one cannot hang CI.
//!
//! Every query here is filtered on the test's own database
//! (`current_database()` of its pool): tests run in parallel against one
//! server and must not see, or touch, each other's connections.

use std::future::Future;
use std::time::{Duration, Instant};

use sqlx::PgPool;
use wiremock::MockServer;

/// How long any wait in the tests may take before the test fails.
pub const PATIENCE: Duration = Duration::from_secs(30);

/// How often a wait looks again.
const POLL: Duration = Duration::from_millis(10);

/// Polls `probe` until it answers `Some`, and returns that; panics naming
/// `what` after [`PATIENCE`].
pub async fn until<T, F, Fut>(what: &str, probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    until_every(what, POLL, probe).await
}

/// [`until`], looking again every `poll` (for a cheap in-process probe
/// whose moment matters, e.g. a request counter).
pub async fn until_every<T, F, Fut>(what: &str, poll: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = probe().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "gave up after {PATIENCE:?} waiting for {what}"
        );
        tokio::time::sleep(poll).await;
    }
}

/// Polls `probe` until it answers `true`; panics naming `what` after [`PATIENCE`].
pub async fn until_true<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until(what, || {
        let f = probe();
        async move { f.await.then_some(()) }
    })
    .await
}

/// Waits until the file `log` (a child's stderr) holds `line`; panics
/// after [`PATIENCE`]. A missing file reads as empty.
pub async fn until_logged(log: &std::path::Path, line: &str) {
    until_true(&format!("{line:?} in {}", log.display()), || async {
        std::fs::read_to_string(log)
            .unwrap_or_default()
            .contains(line)
    })
    .await
}

/// Waits until `server` has received at least `n` requests.
pub async fn requests_seen(server: &MockServer, n: usize) {
    until_true(&format!("{n} request(s) at the fake Stripe"), || async {
        server.received_requests().await.map_or(0, |r| r.len()) >= n
    })
    .await
}

/// Backend pids of the reconciler binary's connections (`application_name =
/// 'stripe-reconciler'`, set by `config::database`) to the test's own database.
pub async fn reconciler_backends(pool: &PgPool) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'stripe-reconciler'
            AND pid <> pg_backend_pid()",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Backend pids of the reconciler binary's connections to the test's own
/// database that wait on a heavyweight lock (`wait_event_type = 'Lock'`).
pub async fn reconciler_backends_waiting_on_a_lock(pool: &PgPool) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity
          WHERE datname = current_database() AND application_name = 'stripe-reconciler'
            AND wait_event_type = 'Lock'",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Backend pids of the reconciler binary's connections to the test's own
/// database that wait on a lock inside a write transaction: they already
/// hold a write lock (`RowExclusiveLock`) on `table`. A scan's phase 3
/// writes `reconciliation_payment_state` before it renews the lease and
/// moves the cursor; a phase 1, which also renews the lease, has written
/// nothing yet.
pub async fn reconciler_writers_waiting_on_a_lock(pool: &PgPool, table: &str) -> Vec<i32> {
    sqlx::query_scalar(
        "SELECT a.pid FROM pg_stat_activity a
          WHERE a.datname = current_database() AND a.application_name = 'stripe-reconciler'
            AND a.wait_event_type = 'Lock'
            AND EXISTS (SELECT 1 FROM pg_locks l
                         WHERE l.pid = a.pid AND l.granted AND l.mode = 'RowExclusiveLock'
                           AND l.relation = to_regclass($1))",
    )
    .bind(table)
    .fetch_all(pool)
    .await
    .unwrap()
}

/// Terminates exactly the backends `pids` (as found by the helpers above);
/// returns how many were terminated.
pub async fn terminate(pool: &PgPool, pids: &[i32]) -> usize {
    let done: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE pid = ANY($1) AND datname = current_database()",
    )
    .bind(pids)
    .fetch_all(pool)
    .await
    .unwrap();
    done.into_iter().filter(|d| *d).count()
}

/// Ungranted lock requests in the test's own database whose lock type is
/// `locktype` (`'advisory'`, `'transactionid'`, `'tuple'`, `'relation'` …),
/// from any backend: how a test sees that another session is blocked.
pub async fn lock_waits(pool: &PgPool, locktype: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE NOT l.granted AND l.locktype = $1 AND a.datname = current_database()",
    )
    .bind(locktype)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Ungranted lock requests of any type in the test's own database.
pub async fn any_lock_waits(pool: &PgPool) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE NOT l.granted AND a.datname = current_database()",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Runs `a` and `b` at once while the test holds payment `payment_id` `FOR
/// UPDATE`, and lets go only when two sessions of the test database wait on
/// a lock: both reached a write of that row at the same moment, so the
/// outcome shows how they behave together, not one after the other.
pub async fn both_writing_at_once<A, B>(
    pool: &PgPool,
    payment_id: i64,
    a: A,
    b: B,
) -> (A::Output, B::Output)
where
    A: Future,
    B: Future,
{
    let mut holder = pool.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM payments WHERE id = $1 FOR UPDATE")
        .bind(payment_id)
        .execute(&mut *holder)
        .await
        .unwrap();
    let release = async move {
        until_true("both writers waiting on the held payment row", || async {
            any_lock_waits(pool).await >= 2
        })
        .await;
        holder.rollback().await.unwrap();
    };
    let (a, b, ()) = tokio::join!(a, b, release);
    (a, b)
}

/// Sends `sig` (`"-TERM"`, `"-INT"`) to the child process with `kill`.
pub fn signal(child: &std::process::Child, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} failed");
}

/// Sends `sig` to the process whose id `pid` holds, once the test has stored
/// it there: for a fake's hook ([`super::stripe_fake::StripeFake::on_request`]),
/// which may run before `spawn` has returned the child to the test. Panics if
/// no id is stored within 10 s.
pub fn signal_pid(pid: &std::sync::atomic::AtomicU32, sig: &str) {
    use std::sync::atomic::Ordering;
    let mut id = pid.load(Ordering::SeqCst);
    for _ in 0..10_000 {
        if id != 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
        id = pid.load(Ordering::SeqCst);
    }
    assert_ne!(id, 0, "no process id to signal");
    let status = std::process::Command::new("kill")
        .args([sig, &id.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {id} failed");
}

/// Runs `sql` on the database at `url` and waits for it to commit, from
/// synchronous code: for a fake's hook ([`super::stripe_fake::StripeFake::on_request`]),
/// which runs inside the fake's own runtime (the statement runs on a thread
/// and runtime of its own).
pub fn execute_now(url: &str, sql: &'static str) {
    use sqlx::Connection;
    let url = url.to_owned();
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async {
                let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
                sqlx::query(sql).execute(&mut conn).await.unwrap();
            });
    })
    .join()
    .unwrap();
}

/// Runs write-mode batches until one wraps the cursor; returns how many
/// batches ran (the wrapping one included). Panics after 1,000 batches, so a
/// cursor that never wraps fails the test instead of hanging CI.
pub async fn scan_until_wrapped(
    pool: &PgPool,
    gw: &stripe_reconciler::stripe::StripeGateway,
    s: &super::Settings,
) -> usize {
    for batches in 1..=1000 {
        if super::scan_with(pool, gw, s).await.unwrap().wrapped {
            return batches;
        }
    }
    panic!("the cursor did not wrap in 1,000 batches");
}
