//! `redlock`: run a command under a Redlock distributed lock (`redlock run`), show who holds
//! a resource (`redlock status`) or every lock under a prefix (`redlock locks`), hand a lock
//! on (`redlock hold`, `redlock run --resume`), or break a dead holder's lock
//! (`redlock release --force`). Exit codes: see [`exit`] and `redlock --help`.
//!
//! Modules, bottom up: `exit` (codes and errors), `say` and `print` (lines on stderr, output
//! on stdout), `args` (the command line), `connect` (the lock handle), `json` (the JSON
//! output), `detached` (a detached lock's file), `signals` and `child` (the command's process
//! group and the signals passed on to it), `run`, `status`, `locks`, `hold` and `release`
//! (the subcommands).
//!
//! Unix only (Linux, macOS, the BSDs): the command's process group, the signals passed on to
//! it and the child subreaper are Unix facilities (through `nix`, a Unix-only dependency).
//! Elsewhere the build stops with one error saying so, not a cascade of unresolved imports.

#[cfg(not(unix))]
compile_error!(
    "redlock-cli (the `redlock` command) supports Unix systems only (Linux, macOS, the BSDs): \
     it runs the command in a process group of its own and passes Unix signals on to it; \
     on Windows, build and run it under WSL"
);

/// Never built: the `compile_error!` above stops a non-Unix build first.
#[cfg(not(unix))]
fn main() {}

#[cfg(unix)]
mod args;
#[cfg(unix)]
mod child;
#[cfg(unix)]
mod connect;
#[cfg(unix)]
mod detached;
#[cfg(unix)]
mod exit;
#[cfg(unix)]
mod hold;
#[cfg(unix)]
mod json;
#[cfg(unix)]
mod locks;
#[cfg(unix)]
mod print;
#[cfg(unix)]
mod release;
#[cfg(unix)]
mod run;
#[cfg(unix)]
mod say;
#[cfg(unix)]
mod signals;
#[cfg(unix)]
mod status;

#[cfg(unix)]
use args::{Cli, Command};
#[cfg(unix)]
use exit::CliError;

#[cfg(unix)]
fn main() -> std::process::ExitCode {
    use std::io::IsTerminal as _;
    use std::process::ExitCode;

    use clap::Parser;
    use clap::error::ErrorKind;

    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            return match error.kind() {
                ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => ExitCode::SUCCESS,
                _ => ExitCode::from(exit::USAGE),
            };
        }
    };
    // The lock's warnings (never a token) on stderr, not the Redis client's own (a connection
    // closed at exit); RUST_LOG for more.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fred=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .without_time()
        .init();
    if let Err(error) = signals::write_from_the_background() {
        say::say(format_args!("{}", error.with_sources()));
        return ExitCode::from(error.exit_code());
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let outcome = match runtime {
        Ok(runtime) => runtime.block_on(async {
            match cli.command {
                Command::Run(args) => run::run(args).await,
                Command::Status(args) => status::status(args).await,
                Command::Locks(args) => locks::locks(args).await,
                Command::Hold(args) => hold::hold(args).await,
                Command::Release(args) => release::release(args).await,
            }
        }),
        Err(source) => Err(CliError::Os {
            what: "could not start the async runtime",
            source,
        }),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(error) => {
            say::say(format_args!("{}", error.with_sources()));
            ExitCode::from(error.exit_code())
        }
    }
}
