//! `stripe-reconciler migrate`

use super::CommandError;
use crate::config::Settings;
use crate::db;

/// Applies the embedded migrations.
pub(super) async fn migrate(settings: &Settings) -> Result<(), CommandError> {
    let pool = db::connect_for_migrations(settings.connect_options()?).await?;
    db::migrate(&pool).await?;
    tracing::info!(
        migrations = crate::MIGRATOR.iter().count(),
        "database schema is up to date"
    );
    Ok(())
}
