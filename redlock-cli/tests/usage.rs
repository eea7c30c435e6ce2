//! Bad input to `redlock`: a clear message and exit code 64, at once (nothing is connected
//! to), never a panic; `--help` documents the exit codes.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

mod support;

use std::time::{Duration, Instant};

use support::{output, redlock};

/// A node URL on a loopback port that nothing listens on (nothing is ever sent to it).
const UNUSED_NODE: &str = "redis://127.0.0.1:9";

/// Each case: the arguments (no nodes in the environment) and what the message must say.
#[tokio::test]
async fn bad_input_exits_64_with_a_clear_message() {
    let cases: &[(&[&str], &str)] = &[
        (
            &[
                "run",
                "--resource",
                "r",
                "--ttl",
                "3x",
                "--nodes",
                UNUSED_NODE,
                "--",
                "true",
            ],
            "invalid value '3x' for '--ttl",
        ),
        (
            &[
                "run",
                "--resource",
                "r",
                "--wait",
                "soon",
                "--nodes",
                UNUSED_NODE,
                "--",
                "true",
            ],
            "invalid value 'soon' for '--wait",
        ),
        (
            &[
                "run",
                "--resource",
                "",
                "--nodes",
                UNUSED_NODE,
                "--",
                "true",
            ],
            "the resource name is empty",
        ),
        (&["run", "--resource", "r", "--", "true"], "REDLOCK_NODES"),
        (
            &[
                "run",
                "--resource",
                "r",
                "--nodes",
                "not a url",
                "--",
                "true",
            ],
            "is malformed",
        ),
        (
            &["run", "--resource", "r", "--nodes", UNUSED_NODE],
            "<COMMAND>",
        ),
        (
            &[
                "run",
                "--resource",
                "r",
                "--fencing-env",
                "A=B",
                "--nodes",
                UNUSED_NODE,
                "--",
                "true",
            ],
            "not an environment variable name",
        ),
        (
            &[
                "run",
                "--resource",
                "r",
                "--ttl",
                "1ms",
                "--nodes",
                UNUSED_NODE,
                "--",
                "true",
            ],
            "leaves no validity",
        ),
        (
            &[
                "run",
                "--resource",
                "r",
                "--mode",
                "shared",
                "--nodes",
                UNUSED_NODE,
                "--",
                "true",
            ],
            "`shared` is not a lock mode; use read, write, or one of NL, CR, CW, PR, PW, EX",
        ),
        (
            &[
                "run",
                "--resource",
                "r",
                "--mode",
                "pr",
                "--lock-at-least-for",
                "1s",
                "--nodes",
                UNUSED_NODE,
                "--",
                "true",
            ],
            "'--mode <MODE>' cannot be used with '--lock-at-least-for",
        ),
        (
            &["status", "", "--nodes", UNUSED_NODE],
            "the resource name is empty",
        ),
        (&["status", "r"], "REDLOCK_NODES"),
        (&["lock", "r"], "unrecognized subcommand"),
        (&[], "Usage"),
    ];
    for (args, message) in cases {
        let started = Instant::now();
        let result = output(redlock(None, args)).await;
        result.expect(64);
        assert!(result.stderr.contains(message), "{args:?}: {result:#?}");
        // Refused before connecting anywhere.
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{args:?} took {:?}",
            started.elapsed()
        );
    }
}

/// `--help` exits 0, documents every exit code, and says the platforms `redlock` supports.
#[tokio::test]
async fn help_documents_the_exit_codes() {
    for args in [&["--help"][..], &["run", "--help"], &["status", "--help"]] {
        let help = output(redlock(None, args)).await;
        help.expect(0);
        if args == ["--help"] {
            assert!(help.stdout.contains("For Unix systems"), "{help:#?}");
        }
        for code in [
            "64", "69", "70", "71", "75", "79", "101", "126, 127", "128 + N",
        ] {
            assert!(
                help.stdout.contains(code),
                "{args:?} lacks {code}: {help:#?}"
            );
        }
    }
}
