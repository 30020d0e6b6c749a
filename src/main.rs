//! `stripe-reconciler`: CLI -> settings -> dispatch -> exit code.

use std::process::ExitCode;

use clap::Parser;
use stripe_reconciler::cli::{Cli, Command};
use stripe_reconciler::config::Settings;
use stripe_reconciler::terminal::escape;
use stripe_reconciler::{commands, exit, telemetry};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let settings = match Settings::from_env() {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "stripe-reconciler: configuration error: {}",
                escape(&e.to_string())
            );
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
    // The CronJobs' commands log their failure as a JSON line for the log
    // collector; a person typing a command (or a configuration error, which a
    // person must fix) gets one readable line.
    let scheduled = matches!(
        cli.command,
        Command::Run { .. } | Command::Events | Command::Repair
    );
    match runtime.block_on(commands::dispatch(cli.command, settings)) {
        Ok(()) => ExitCode::from(exit::SUCCESS),
        Err(e) => {
            let code = e.exit_code();
            let for_a_person = !scheduled || matches!(e, commands::CommandError::Config(_));
            let report = format!("{:#}", anyhow::Error::new(e)).replace('\n', " ");
            if for_a_person {
                // Messages can quote the database or Stripe (docs/design.md, "Invariants").
                eprintln!("stripe-reconciler: error: {}", escape(&report));
            } else {
                tracing::error!(exit_code = code, error = report, "stripe-reconciler failed");
            }
            ExitCode::from(code)
        }
    }
}
