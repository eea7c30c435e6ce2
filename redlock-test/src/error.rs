//! Why a server could not be started.

use std::path::PathBuf;

/// Why [`TestServer::try_start`](crate::TestServer::try_start) could not start a server.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// No binary: the environment variable is unset and the program is not on `PATH`.
    #[error("{program} not found: install it, put it on PATH or set {env_var} to its path")]
    NotFound {
        /// The program looked for on `PATH` ([`ServerKind::program`](crate::ServerKind::program)).
        program: &'static str,
        /// The environment variable that was unset
        /// ([`ServerKind::env_var`](crate::ServerKind::env_var)).
        env_var: &'static str,
    },
    /// The binary could not be run (missing file, not executable, ...), or the server's
    /// working directory could not be made.
    #[error("could not run {}", bin.display())]
    Spawn {
        /// The binary.
        bin: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
    /// The server exited while starting (a bad argument, a port taken meanwhile); it is
    /// tried again on other ports before this is returned.
    #[error("{} exited while starting ({status}): {stderr}", bin.display())]
    Exited {
        /// The binary.
        bin: PathBuf,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The end of what it wrote to its standard error and output (its log).
        stderr: String,
    },
    /// The server did not answer `PING` within 10 s.
    #[error("{} did not answer PING within 10 s", bin.display())]
    NoAnswer {
        /// The binary.
        bin: PathBuf,
    },
}
