use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("UNREAD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rdkafka=warn,sqlx=warn"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let cli = unread::cli::Cli::parse();
    match unread::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("unread: {e:#}");
            ExitCode::FAILURE
        }
    }
}
