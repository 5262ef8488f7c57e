use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if let Err(e) = unread::cli::config_file::apply(&args, &<unread::cli::Cli as clap::CommandFactory>::command()) {
        eprintln!("unread: --config: {e:#}");
        return ExitCode::FAILURE;
    }
    let cli = unread::cli::Cli::parse_from(args);
    unread::cli::init_logging(cli.log_format);
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
