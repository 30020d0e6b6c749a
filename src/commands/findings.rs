//! `stripe-reconciler findings list|show|resolve`: the review queue
//! ([`crate::review`]).

use super::CommandError;
use crate::cli::FindingsCommand;
use crate::config::Settings;
use crate::review::{self, ListFormat, ListQuery, ReviewError};

/// Runs one `findings` subcommand.
pub(super) async fn findings(
    settings: &Settings,
    command: FindingsCommand,
) -> Result<(), CommandError> {
    let outbox = &settings.outbox;
    match command {
        FindingsCommand::List {
            kind,
            open,
            json,
            csv,
            limit,
            dashboard,
        } => {
            let query = ListQuery {
                kind: kind.as_deref(),
                open,
                limit,
            };
            let format = ListFormat::of_flags(csv, json);
            let mode = settings.stripe.dashboard_mode(dashboard);
            let (_pool, mut conn) = super::connect(settings).await?;
            Ok(review::list(&mut conn, query, format, mode).await?)
        }
        FindingsCommand::Show(args) => {
            let mode = settings.stripe.dashboard_mode(args.dashboard);
            let (_pool, mut conn) = super::connect(settings).await?;
            Ok(review::show(&mut conn, args.id, args.json, mode).await?)
        }
        FindingsCommand::Resolve {
            file: Some(file),
            by,
            dry_run,
            ..
        } => {
            let lines = review::read_file(&file, by.as_deref())?;
            let (_pool, mut conn) = super::connect(settings).await?;
            Ok(review::resolve_file(&mut conn, outbox, &lines, &file, dry_run).await?)
        }
        FindingsCommand::Resolve { id, note, by, .. } => {
            // clap requires both without --file.
            let (Some(id), Some(note)) = (id, note) else {
                return Err(
                    ReviewError::Usage("give ID --note NOTE, or --file PATH".into()).into(),
                );
            };
            let by = review::who_resolves(&note, by.as_deref())?;
            let (_pool, mut conn) = super::connect(settings).await?;
            Ok(review::resolve(&mut conn, outbox, id, &note, by).await?)
        }
    }
}
