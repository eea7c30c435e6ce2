//! The command line, parsed by clap: `redlock run`, `status`, `locks`, `hold` and `release`,
//! and the checks on each value made before anything is sent (durations, resource names,
//! variable names).

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use redlock_core::{MAX_RESOURCE_LEN, Mode};

use crate::exit::EXIT_CODES_HELP;

/// Run a command under a Redlock distributed lock, or show who holds one. For Unix systems
/// (Linux, macOS, the BSDs): the command runs in a process group of its own, signalled with
/// Unix signals.
///
/// The nodes are independent Redis masters, from --nodes or the REDLOCK_NODES environment
/// variable: comma-separated URLs such as redis://user:password@10.0.0.1:6379/0 (rediss://
/// for TLS). The handle's other REDLOCK_* variables are read too (REDLOCK_KEY_PREFIX,
/// REDLOCK_NODE_TIMEOUT, REDLOCK_CONNECT_TIMEOUT, REDLOCK_TLS_CA...); the lock options'
/// variables (REDLOCK_TTL, REDLOCK_FENCING, REDLOCK_LOCK_AT_LEAST_FOR...) are not: they belong
/// to the applications sharing the environment, and the lock is set by the flags (--ttl,
/// --mode, --lock-at-least-for...).
#[derive(Debug, Parser)]
#[command(name = "redlock", version, after_long_help = EXIT_CODES_HELP, after_help = EXIT_CODES_HELP)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// What to do.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Take the lock on a resource, run a command while keeping the lock extended, and
    /// release it once nothing of the command's process group is left.
    ///
    /// The command runs in a process group of its own (as under `timeout`), so that what it
    /// starts is signalled with it; processes it leaves behind when it exits get SIGTERM, then
    /// SIGKILL after --grace, before the lock is released (a process that calls `setsid` or
    /// `setpgid` leaves the group and is not waited for). If the lock is lost while the
    /// command runs (an extension refused, or none confirmed in time), the group gets SIGTERM,
    /// then SIGKILL after --grace, and redlock exits with 79; without a confirmed extension,
    /// SIGTERM goes out --grace plus min(ttl/10, 1s) before the lock's validity ends, so that
    /// SIGKILL comes before it ends (a --grace that does not fit in the --ttl is refused).
    /// SIGKILL never waits past the validity's end less min(ttl/10, 1s): a loss seen late
    /// (redlock frozen or starved of CPU) cuts the grace short, to nothing once the validity
    /// is over; an extension refused by a majority (the keys expired, deleted or another
    /// holder's) ends the validity there, so SIGKILL follows SIGTERM at once.
    /// SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to redlock are passed on to
    /// the command's group, each followed by SIGCONT; SIGTSTP (Ctrl-Z) is ignored, and a
    /// background redlock writes to a `tostop` terminal without being stopped. Stop
    /// redlock with SIGTERM or SIGINT, never SIGKILL: a killed redlock leaves the command
    /// running without the lock. The command does not inherit the REDLOCK_* variables, and
    /// gets /dev/null as standard input when redlock's is a terminal.
    ///
    /// With --resume FILE, the lock `redlock hold` detached is taken up instead of acquired
    /// (exit 80 if it is gone), then everything above holds the same.
    #[command(after_long_help = EXIT_CODES_HELP, after_help = EXIT_CODES_HELP)]
    Run(RunArgs),
    /// Show whether a holder is present on each node, and the lock key's remaining ttl
    /// there, then each permit of a counting semaphore on the resource when one is in use
    /// (its number of permits is stored on the nodes); with --permits K, the K permits only.
    /// The token is never read out of the nodes. With --json, the same as one JSON object
    /// (the field names are in the user guide's command-line page).
    #[command(after_long_help = EXIT_CODES_HELP, after_help = EXIT_CODES_HELP)]
    Status(StatusArgs),
    /// List the locks held on resources whose names start with PREFIX (every resource without
    /// it): one line per resource with the nodes holding it, the quorum, the holder's owner
    /// label and the ttl a quorum of nodes keep it, and the permits held of a counting
    /// semaphore on it. Every node's keys are scanned (SCAN, 500 keys per call): the lock's
    /// own bookkeeping keys are skipped, a foreign client's `SET key value NX PX` is listed as
    /// a lock without an owner label, and other data of the same name (another type, a
    /// string without an expiry) is not a lock. The token is never read out of the nodes.
    #[command(after_long_help = EXIT_CODES_HELP, after_help = EXIT_CODES_HELP)]
    Locks(LocksArgs),
    /// Take the lock on a resource and hand it on without releasing it: print the detached
    /// lock as JSON on stdout (or write it to --out FILE, mode 0600), and exit. The lock then
    /// lives until its ttl: nothing extends it, unless `redlock run --resume FILE` takes it
    /// up (extended from then on, released at the end) or `redlock release --detached FILE`
    /// releases it.
    ///
    /// The JSON holds the lock's token: it is the one place a token leaves redlock, and
    /// whoever reads it can take the lock over or release it. Keep it as you would a
    /// password (--out writes it readable by its owner only).
    #[command(after_long_help = EXIT_CODES_HELP, after_help = EXIT_CODES_HELP)]
    Hold(HoldArgs),
    /// Break a lock: remove whoever holds the resource on every node, whatever their token,
    /// and wake its waiters (`--force` is required). For a holder known to be dead while its
    /// ttl is long. A holder that is still alive keeps working until its next extension is
    /// refused, and may overlap the next holder until then: prefer stopping it. Always logged
    /// as a warning. A key that is not a lock (another application's data of the same name)
    /// is left as it is. The holders of a counting semaphore's permits on the resource
    /// (`redlock run --permits K`) are removed too.
    ///
    /// With --detached FILE instead: release the lock `redlock hold` detached, by its token
    /// (compare-and-delete; a lock resumed since holds another token and is left alone).
    #[command(after_long_help = EXIT_CODES_HELP, after_help = EXIT_CODES_HELP)]
    Release(ReleaseArgs),
}

/// `redlock run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The resource to lock, e.g. `nightly-report` (not with --resume: the file names it).
    #[arg(long, value_parser = resource, required_unless_present = "resume")]
    pub(crate) resource: Option<String>,
    /// Take up the lock `redlock hold` detached (its JSON, in this file) instead of
    /// acquiring one: it is resumed with its own resource, ttl, mode or permit and fencing,
    /// then the command runs as with an acquired lock. Not with the acquisition's flags
    /// (--resource, --ttl, --wait, --mode, --permits, --lock-at-least-for). A lock that
    /// expired, was released or was resumed already exits 80 without running the command.
    #[arg(
        long,
        value_name = "FILE",
        conflicts_with_all = ["resource", "ttl", "wait", "mode", "permits", "lock_at_least_for"]
    )]
    pub(crate) resume: Option<PathBuf>,
    /// The lock's time to live on each node; it is extended every third of it while the
    /// command runs (e.g. 30s, 1m, 500ms).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub(crate) ttl: Duration,
    /// How long to wait for a busy resource before giving up with exit code 75; `0s` makes a
    /// single attempt (skip if busy), `forever` waits until the lock is taken.
    #[arg(long, default_value = "10s", value_parser = wait)]
    pub(crate) wait: Duration,
    /// Keep the lock at least this long after it was taken, however soon the command exits
    /// (at most the ttl): a replica whose schedule fires a little later, or which was still
    /// attempting after a split vote, finds the lock held and skips (ShedLock's
    /// lockAtLeastFor). Released before then, the key is kept until then instead of deleted.
    #[arg(long, value_parser = duration)]
    pub(crate) lock_at_least_for: Option<Duration>,
    /// Take the lock in a lock mode, shared with holders in compatible modes: `pr` (or
    /// `read`) is shared by readers, `ex` (or `write`) excludes every other holder but `nl`.
    /// One of nl, cr, cw, pr, pw, ex (null, concurrent_read, concurrent_write,
    /// protected_read, protected_write, exclusive), case-insensitive. Without it the lock is
    /// the plain exclusive one, which also excludes every holder in a mode. Not with
    /// --lock-at-least-for.
    #[arg(long, value_name = "MODE", value_parser = mode, conflicts_with = "lock_at_least_for")]
    pub(crate) mode: Option<Mode>,
    /// Take one of this many permits of a counting semaphore on the resource instead of its
    /// lock: at most that many commands run at once on the resource across every machine
    /// (1 to 1024; every run on the resource must give the same number). Not with --mode or
    /// --fencing-env.
    #[arg(
        long,
        value_name = "K",
        value_parser = clap::value_parser!(u32).range(1..=1024),
        conflicts_with_all = ["mode", "fencing_env"]
    )]
    pub(crate) permits: Option<u32>,
    /// Take a fencing token with the lock (needs more nodes to confirm it: 3 of 3, 4 of 5)
    /// and pass it to the command in this environment variable.
    #[arg(long, value_name = "VAR", value_parser = env_var)]
    pub(crate) fencing_env: Option<String>,
    /// How long the command's process group has to exit after SIGTERM (the lock lost, or
    /// processes left behind by the command), before SIGKILL; less when the lock's validity
    /// ends sooner. It must fit in the ttl: the default 30s ttl takes up to about 18s.
    #[arg(long, default_value = "10s", value_parser = duration)]
    pub(crate) grace: Duration,
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,
    /// The command to run, and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

/// `redlock status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    /// The resource to look at.
    #[arg(value_parser = resource)]
    pub(crate) resource: String,
    /// Show the permits of the counting semaphore of this many permits on the resource
    /// (the K of the `redlock run --permits K` that take them), permit by permit, instead of
    /// its lock; without it, the number the nodes store is used. With a smaller number, the
    /// permits above it are not shown.
    #[arg(
        long,
        value_name = "K",
        value_parser = clap::value_parser!(u32).range(1..=1024)
    )]
    pub(crate) permits: Option<u32>,
    /// Print the status as one JSON object instead of text (never the token).
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,
}

/// `redlock locks`.
#[derive(Debug, Args)]
pub(crate) struct LocksArgs {
    /// List the resources whose names start with this (after the key prefix); all of them
    /// without it.
    #[arg(default_value = "")]
    pub(crate) prefix: String,
    /// Print the list as one JSON object instead of text (never a token).
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,
}

/// `redlock hold`.
#[derive(Debug, Args)]
pub(crate) struct HoldArgs {
    /// The resource to lock.
    #[arg(value_parser = resource)]
    pub(crate) resource: String,
    /// The lock's time to live on each node: how long it lives unless resumed (never
    /// extended until then).
    #[arg(long, default_value = "30s", value_parser = duration)]
    pub(crate) ttl: Duration,
    /// How long to wait for a busy resource before giving up with exit code 75; `0s` makes a
    /// single attempt, `forever` waits until the lock is taken.
    #[arg(long, default_value = "10s", value_parser = wait)]
    pub(crate) wait: Duration,
    /// Write the detached lock to this file (created or replaced, readable and writable by
    /// its owner only: mode 0600) instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub(crate) out: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,
}

/// `redlock release --force` or `redlock release --detached`.
#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    /// The resource whose holder to remove (with --force).
    #[arg(value_parser = resource, required_unless_present = "detached")]
    pub(crate) resource: Option<String>,
    /// Required with a resource: say that you mean to break the lock, whoever holds it (a
    /// holder releases its own lock when its command exits).
    #[arg(long, required_unless_present = "detached")]
    pub(crate) force: bool,
    /// Release the lock `redlock hold` detached (its JSON, in this file) by its token,
    /// instead of breaking a resource's lock. A lock that expired, was released or was
    /// resumed since exits 80.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["resource", "force"])]
    pub(crate) detached: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) nodes: NodeArgs,
}

/// Where the nodes are.
#[derive(Debug, Args)]
pub(crate) struct NodeArgs {
    /// The nodes' URLs, comma-separated (or --nodes given once per node); by default those in
    /// the REDLOCK_NODES environment variable.
    #[arg(long, value_name = "URL,URL,...", value_delimiter = ',')]
    pub(crate) nodes: Vec<String>,
    /// A prefix added to the resource to form the Redis key (the same as the applications
    /// locking it use, e.g. `lock:`); default `REDLOCK_KEY_PREFIX`, else none.
    #[arg(long)]
    pub(crate) key_prefix: Option<String>,
}

/// A duration such as `30s`, `1m 30s`, `500ms` (humantime).
fn duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}; give a duration such as 30s, 1m 30s or 500ms"))
}

/// [`duration`], or `forever` (`Duration::MAX`: wait until the lock is taken).
fn wait(text: &str) -> Result<Duration, String> {
    if text.eq_ignore_ascii_case("forever") {
        return Ok(Duration::MAX);
    }
    duration(text)
}

/// A lock mode, by the names [`Mode`]'s `FromStr` takes (`pr`, `protected_read`, `read`...).
fn mode(text: &str) -> Result<Mode, String> {
    text.parse::<Mode>().map_err(|e| e.to_string())
}

/// A resource name: not empty, at most [`MAX_RESOURCE_LEN`] bytes (a NUL byte cannot be in an
/// argument).
fn resource(text: &str) -> Result<String, String> {
    if text.is_empty() {
        return Err(
            "the resource name is empty; name what you are locking, e.g. nightly-report".into(),
        );
    }
    if text.len() > MAX_RESOURCE_LEN {
        return Err(format!(
            "the resource name is {} bytes, more than the {MAX_RESOURCE_LEN} allowed",
            text.len()
        ));
    }
    Ok(text.to_owned())
}

/// An environment variable name: letters, digits and `_`, not starting with a digit.
fn env_var(text: &str) -> Result<String, String> {
    let mut chars = text.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "`{text}` is not an environment variable name (letters, digits and _, e.g. FENCING_TOKEN)"
        ));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn values_are_checked_before_anything_is_sent() {
        assert_eq!(duration("1m 30s"), Ok(Duration::from_secs(90)));
        assert!(duration("3x").is_err());
        assert!(duration("").is_err());
        assert_eq!(wait("forever"), Ok(Duration::MAX));
        assert_eq!(wait("0s"), Ok(Duration::ZERO));
        for (name, expected) in [
            ("nl", Mode::Null),
            ("PR", Mode::ProtectedRead),
            ("ex", Mode::Exclusive),
            ("read", Mode::ProtectedRead),
        ] {
            assert_eq!(mode(name), Ok(expected));
        }
        let refused = mode("shared").map_err(|e| e.contains("NL, CR, CW, PR, PW, EX"));
        assert_eq!(refused, Err(true));
        assert!(resource("").is_err());
        assert!(resource(&"x".repeat(MAX_RESOURCE_LEN + 1)).is_err());
        assert_eq!(resource("job:1"), Ok("job:1".to_owned()));
        assert!(env_var("FENCING_TOKEN").is_ok());
        assert!(env_var("_X1").is_ok());
        for bad in ["", "1X", "A-B", "A=B"] {
            assert!(env_var(bad).is_err(), "{bad}");
        }
    }
}
