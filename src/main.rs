use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let cli = unread::cli::Cli::parse();
    match unread::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("unread: {e:#}");
            ExitCode::FAILURE
        }
    }
}
