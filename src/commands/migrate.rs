//! `stripe-reconciler migrate [--unique-payment-intent-index]`: the schema
//! set up ([`crate::migrate`]).

use super::CommandError;
use crate::config::Settings;
use crate::migrate;

/// Opens the migrations' pool and runs `migrate`'s steps; `unique` is
/// `--unique-payment-intent-index`.
pub(super) async fn migrate(settings: &Settings, unique: bool) -> Result<(), CommandError> {
    let pool = settings.database.connect_for_migrations().await?;
    Ok(migrate::migrate(&pool, settings, unique).await?)
}
