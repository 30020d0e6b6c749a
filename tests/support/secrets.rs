//! Distinctive secrets for the tests that prove the binary never prints them.

use sqlx::PgPool;

use super::{all_output, database_url};

pub const SECRET_KEY: &str = "sk_test_DistinctiveKey9f8e7d6c5b4a";
pub const DB_PASSWORD: &str = "Distinctive-db-password-31415";

/// The test database's URL with a password in it (trust auth ignores it), so
/// a leak of DATABASE_URL would show.
pub fn url_with_password(pool: &PgPool) -> String {
    let mut url = url::Url::parse(&database_url(pool)).unwrap();
    url.set_password(Some(DB_PASSWORD)).unwrap();
    url.to_string()
}

/// Fails when the API key or the database password is in the output.
pub fn assert_no_secret(o: &std::process::Output) {
    let all = all_output(o);
    assert!(!all.contains(SECRET_KEY), "the API key leaked:\n{all}");
    assert!(
        !all.contains(DB_PASSWORD),
        "the database password leaked:\n{all}"
    );
}
