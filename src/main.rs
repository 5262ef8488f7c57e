use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("UNREAD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rdkafka=warn,sqlx=warn"));
    // Colours only on a terminal: a log file or a collector gets plain `key=value` text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi).init();
    let cli = unread::cli::Cli::parse();
    match unread::cli::run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("unread: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// mimalloc: the fold and fan-out allocate and free many small ids and range sets; glibc's allocator spent a sixth
/// of `unread fold`'s time in malloc and free (perf, v2 full set).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
