//! A real PgBouncer (Debian's `pgbouncer`, installed by scripts/test.sh) in
//! transaction pooling mode, one private instance per test on a free port
//! with its own ini and auth file in a temporary directory. `* =` routes every
//! database name to the test server, so the test's own database is reached.
//!
//! Pinned to the mode under test: no prepared statements across transactions.
//! PgBouncer 1.21 added `max_prepared_statements` (on by default from 1.24),
//! which would make a pooler-safety test pass whatever the job sends; the ini
//! sets it to 0 where the version knows it (older versions refuse the key and
//! have no such support), and [`PgBouncer::assert_no_prepared_statements`]
//! checks the running pooler with `SHOW CONFIG` / `SHOW VERSION`.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub struct PgBouncer {
    child: Child,
    dir: PathBuf,
    user: String,
    pub port: u16,
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn binary() -> String {
    std::env::var("PGBOUNCER_BIN").unwrap_or_else(|_| {
        if std::path::Path::new("/usr/sbin/pgbouncer").exists() {
            "/usr/sbin/pgbouncer".into()
        } else {
            "pgbouncer".into()
        }
    })
}

/// The first PgBouncer version with `max_prepared_statements`.
const PREPARED_STATEMENTS_SINCE: (u32, u32) = (1, 21);

/// `(major, minor)` of a version text such as `PgBouncer 1.18.0` or `1.24.1`.
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let v = text
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))?;
    let mut parts = v.split('.').map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??))
}

/// The installed pooler's version (`pgbouncer --version`).
fn installed_version(bin: &str) -> (u32, u32) {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {bin} --version ({e})"));
    let text = String::from_utf8_lossy(&out.stdout);
    parse_version(text.lines().next().unwrap_or_default())
        .unwrap_or_else(|| panic!("unreadable {bin} --version: {text}"))
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// Starts a pooler in front of the server of `DATABASE_URL`, with at most
/// `pool_size` server connections per database (small, so clients share them
/// the way they do in production).
pub async fn start(pool_size: u32) -> PgBouncer {
    let server = url::Url::parse(&std::env::var("DATABASE_URL").expect("DATABASE_URL")).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = std::env::temp_dir().join(format!("stripe-reconciler-pgbouncer-{port}"));
    std::fs::create_dir_all(&dir).unwrap();
    let user = server.username().to_owned();
    let auth = dir.join("userlist.txt");
    std::fs::write(
        &auth,
        format!("\"{user}\" \"{}\"\n", server.password().unwrap_or("")),
    )
    .unwrap();
    // PgBouncer refuses to run as root; `user` makes it drop privileges.
    let run_as = if running_as_root() {
        "user = postgres\n"
    } else {
        ""
    };
    let bin = binary();
    let prepared = if installed_version(&bin) >= PREPARED_STATEMENTS_SINCE {
        "max_prepared_statements = 0\n"
    } else {
        ""
    };
    let ini = dir.join("pgbouncer.ini");
    std::fs::write(
        &ini,
        format!(
            "[databases]\n* = host={host} port={pgport}\n\n[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\nauth_type = trust\nauth_file = {auth}\npool_mode = transaction\ndefault_pool_size = {pool_size}\nmax_client_conn = 100\nadmin_users = {user}\n{prepared}{run_as}",
            host = server.host_str().unwrap_or("127.0.0.1"),
            pgport = server.port().unwrap_or(5432),
            auth = auth.display(),
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("pgbouncer.log")).unwrap();
    let child = Command::new(&bin)
        .arg(&ini)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot start {bin} ({e}); scripts/test.sh installs it (apt-get install pgbouncer)"
            )
        });
    let bouncer = PgBouncer {
        child,
        dir,
        user,
        port,
    };
    for _ in 0..100 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return bouncer;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("PgBouncer on port {port} did not start: {}", bouncer.log());
}

impl PgBouncer {
    /// A URL for `database` through the pooler, with `query` appended
    /// (e.g. `statement-cache-capacity=0`).
    pub fn url(&self, database: &str, query: &str) -> String {
        let server = url::Url::parse(&std::env::var("DATABASE_URL").unwrap()).unwrap();
        let mut url = server.clone();
        url.set_port(Some(self.port)).unwrap();
        url.set_path(database);
        url.set_query((!query.is_empty()).then_some(query));
        url.to_string()
    }

    /// Asserts that the binary's `what` through this pooler exited 0 without
    /// a prepared-statement error (the pooler-safety promise).
    pub fn assert_ok(&self, what: &str, out: &std::process::Output) {
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{what} through PgBouncer failed\nstderr: {stderr}\npgbouncer log: {}",
            self.log()
        );
        assert!(!stderr.contains("prepared statement"), "{what}: {stderr}");
    }

    /// PgBouncer's own log (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }

    /// Asserts, on the running pooler's admin console, that it cannot keep a
    /// prepared statement across transactions: `SHOW CONFIG` lists
    /// `max_prepared_statements` as 0, or (versions before 1.21, which refuse
    /// the key) `SHOW VERSION` predates the feature. Also that it pools by
    /// transaction. A test through this pooler is only evidence of pooler
    /// safety when this holds.
    pub async fn assert_no_prepared_statements(&self) {
        let config = self.show("CONFIG").await;
        let setting = |key: &str| {
            config
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{key}|")))
                .map(|rest| rest.split('|').next().unwrap_or_default().to_owned())
        };
        assert_eq!(
            setting("pool_mode").as_deref(),
            Some("transaction"),
            "the test pooler must run in transaction mode: {config}"
        );
        match setting("max_prepared_statements") {
            Some(n) => assert_eq!(
                n, "0",
                "the pooler supports prepared statements: the test would prove nothing\n{config}"
            ),
            None => {
                let version = self.show("VERSION").await;
                let parsed = parse_version(&version);
                assert!(
                    parsed.is_some_and(|v| v < PREPARED_STATEMENTS_SINCE),
                    "no max_prepared_statements in SHOW CONFIG, yet the version is {version:?}: {config}"
                );
            }
        }
    }

    /// `SHOW <what>` on the admin console, as text rows.
    pub async fn show(&self, what: &str) -> String {
        let out = Command::new("psql")
            .arg(format!(
                "postgres://{}@127.0.0.1:{}/pgbouncer",
                self.user, self.port
            ))
            .args(["-Atc", &format!("SHOW {what}")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}
