//! `DATABASE_URL` (docs/configuration.md): required by every subcommand, and
//! secret (it may hold the password), so no error echoes it.

use std::str::FromStr;
use std::time::Duration;

use secrecy::{ExposeSecret, SecretString};
use serde::Deserialize;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::PgPool;

use super::error::{invalid, ConfigError};
use super::value;

const VAR: &str = "DATABASE_URL";

#[derive(Deserialize)]
struct DatabaseVars {
    database_url: Option<SecretString>,
}

/// The database group: `DATABASE_URL` (secret: it may hold the password)
/// and its connect options; it opens the pools ([`DatabaseSettings::connect`],
/// [`DatabaseSettings::connect_for_migrations`]). Its `Debug` prints no part
/// of the URL.
#[derive(Clone)]
pub struct DatabaseSettings {
    url: SecretString,
    options: PgConnectOptions,
}

impl std::fmt::Debug for DatabaseSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DatabaseSettings")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl DatabaseSettings {
    /// The group from a `postgres://` URL.
    ///
    /// # Errors
    /// [`ConfigError`] naming `DATABASE_URL` (the URL is never echoed).
    pub fn from_url(url: SecretString) -> Result<Self, ConfigError> {
        let value = url.expose_secret();
        if !(value.starts_with("postgres://") || value.starts_with("postgresql://")) {
            return Err(invalid(VAR, "must start with postgres:// or postgresql://"));
        }
        let options = connect_options(&url)?;
        Ok(DatabaseSettings { url, options })
    }

    /// `DATABASE_URL` (secret).
    pub fn url(&self) -> &SecretString {
        &self.url
    }

    /// PostgreSQL connect options from `DATABASE_URL`, tagged
    /// `application_name = stripe-reconciler` (so `pg_stat_activity` shows
    /// who holds a connection).
    ///
    /// Never `Debug`-print the result: sqlx's `Debug` shows the password.
    pub fn connect_options(&self) -> PgConnectOptions {
        self.options.clone()
    }

    /// Opens a small pool (the job needs one connection at a time, plus one
    /// spare). The first connection is made now, so a wrong URL fails here.
    /// Statements are bounded per transaction (`store::begin`).
    ///
    /// # Errors
    /// [`ConnectError`] (host, credentials, TLS).
    pub async fn connect(&self) -> Result<PgPool, ConnectError> {
        self.pool(2).await
    }

    /// A pool for `migrate`: one connection and no statement timeout, since
    /// building an index on a large `payments` table takes as long as it
    /// takes (the migrations bound their lock waits themselves).
    ///
    /// # Errors
    /// [`ConnectError`] (host, credentials, TLS).
    pub async fn connect_for_migrations(&self) -> Result<PgPool, ConnectError> {
        self.pool(1).await
    }

    /// A pool of at most `max_connections`, waiting up to 10 s for a
    /// connection. Startup parameters are those a pooler accepts: sqlx's
    /// default `extra_float_digits` is refused by PgBouncer (`unsupported
    /// startup parameter`) unless the pooler is told to ignore it;
    /// PostgreSQL 12+ prints exact floats without it, and sqlx reads floats
    /// in binary anyway.
    async fn pool(&self, max_connections: u32) -> Result<PgPool, ConnectError> {
        PgPoolOptions::new()
            .max_connections(max_connections)
            .acquire_timeout(Duration::from_secs(10))
            .connect_with(self.connect_options().extra_float_digits(None))
            .await
            .map_err(ConnectError)
    }
}

/// The pool could not be opened: connecting to `DATABASE_URL` failed (host,
/// credentials, TLS). The URL is never part of the message.
#[derive(Debug, thiserror::Error)]
#[error("cannot connect to PostgreSQL (DATABASE_URL)")]
pub struct ConnectError(#[source] pub sqlx::Error);

/// `DATABASE_URL`, checked to be a `postgres://` connection string.
///
/// # Errors
/// [`ConfigError`] naming `DATABASE_URL`.
pub(super) fn parse<I>(vars: I) -> Result<DatabaseSettings, ConfigError>
where
    I: IntoIterator<Item = (String, String)>,
{
    let raw: DatabaseVars = value::read(None, vars)?;
    let url = raw
        .database_url
        .filter(|u| !u.expose_secret().trim().is_empty())
        .ok_or(ConfigError::Missing { var: VAR })?;
    DatabaseSettings::from_url(url)
}

/// PostgreSQL connect options from the URL, tagged `application_name =
/// stripe-reconciler` (so `pg_stat_activity` shows who holds a connection).
///
/// Never `Debug`-print the result: sqlx's `Debug` shows the password.
///
/// # Errors
/// [`ConfigError::Invalid`] for `DATABASE_URL`.
fn connect_options(url: &SecretString) -> Result<PgConnectOptions, ConfigError> {
    PgConnectOptions::from_str(url.expose_secret())
        .map(|o| o.application_name("stripe-reconciler"))
        .map_err(|_| invalid(VAR, "is not a valid postgres:// connection string"))
}
