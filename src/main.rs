//! `stripe-reconciler`: CLI -> settings -> dispatch -> exit code.

use std::process::ExitCode;

use clap::Parser;
use stripe_reconciler::cli::Cli;
use stripe_reconciler::config::Settings;
use stripe_reconciler::{commands, exit, telemetry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("stripe-reconciler: configuration error: {e}");
            return ExitCode::from(exit::CONFIG);
        }
    };
    telemetry::init(settings.log_format);
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(exit::FAILURE);
        }
    };
    match runtime.block_on(commands::dispatch(cli.command, settings)) {
        Ok(()) => ExitCode::from(exit::SUCCESS),
        Err(e) => {
            let code = e.exit_code();
            let report = anyhow::Error::new(e);
            tracing::error!(
                exit_code = code,
                error = format!("{report:#}"),
                "stripe-reconciler failed"
            );
            ExitCode::from(code)
        }
    }
}
