//! What a node runs for one cycle of each primitive, read from `MONITOR` on a real
//! redis-server: a plain uncontended lock + release is the floor's work and nothing else (the
//! spec's `SET NX PX`, then its compare-and-delete: a read, `DEL`), and every other primitive
//! runs no command beyond its own list. Bookkeeping for hand-over, windows, streaks, fencing,
//! modes or owner labels runs only when that feature is in play.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::BTreeSet;
use std::time::Duration;

use redlock_core::{LockOptions, Mode, Redlock};
use redlock_tests::{RedisNodes, plain_client, within};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

/// The key a plain client reads to mark the end of a trace.
const END: &str = "trace:end";

/// One command as `MONITOR` shows it: its name (upper case), whether a script ran it, and its
/// arguments as `MONITOR` quotes them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Seen {
    name: String,
    in_script: bool,
    args: String,
}

/// A `MONITOR` line's command: `<time> [<db> <client>|lua] "NAME" "arg"...`.
fn parse(line: &str) -> Option<Seen> {
    let (client, rest) = line.split_once('[')?.1.split_once("] ")?;
    let name = rest
        .strip_prefix('"')?
        .split('"')
        .next()?
        .to_ascii_uppercase();
    let args = rest.get(name.len() + 2..)?.trim().to_owned();
    Some(Seen {
        name,
        in_script: client.ends_with("lua"),
        args,
    })
}

/// A `MONITOR` connection to the node at `url`, ready (its `+OK` read).
struct Monitor {
    lines: tokio::io::Lines<BufReader<TcpStream>>,
    /// The client that sends the end mark, connected before the trace starts (its handshake
    /// is not in the trace).
    marker: fred::clients::Client,
}

impl Monitor {
    async fn start(url: &str) -> Self {
        let marker = plain_client(url).await;
        let address = url.trim_start_matches("redis://").trim_end_matches('/');
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream.write_all(b"MONITOR\r\n").await.unwrap();
        let mut lines = BufReader::new(stream).lines();
        assert_eq!(lines.next_line().await.unwrap().as_deref(), Some("+OK"));
        Self { lines, marker }
    }

    /// Every command the node ran from now until a plain client's `GET trace:end`, which
    /// marks the end (sent after `cycle` returned, and after every call the cycle left
    /// behind has landed: a release returns at a quorum, so the trace waits for the sentinel).
    async fn trace<F: std::future::Future<Output = ()>>(mut self, cycle: F) -> Vec<Seen> {
        cycle.await;
        let _: Option<String> = fred::interfaces::KeysInterface::get(&self.marker, END)
            .await
            .unwrap();
        let mut seen = Vec::new();
        within("the trace's end", async {
            while let Some(line) = self.lines.next_line().await.unwrap() {
                let Some(command) = parse(&line) else {
                    continue;
                };
                if !command.in_script && command.name == "GET" && line.contains(END) {
                    return;
                }
                seen.push(command);
            }
        })
        .await;
        seen
    }
}

/// What the node at `url` runs for `cycle` ([`Monitor::trace`]).
async fn trace_of<F: std::future::Future<Output = ()>>(url: &str, cycle: F) -> Vec<Seen> {
    Monitor::start(url).await.trace(cycle).await
}

/// The commands scripts ran, in order.
fn in_scripts(seen: &[Seen]) -> Vec<&str> {
    seen.iter()
        .filter(|s| s.in_script)
        .map(|s| s.name.as_str())
        .collect()
}

/// The commands the handle sent (not from scripts), other than the client's heartbeat.
fn sent(seen: &[Seen]) -> Vec<&str> {
    seen.iter()
        .filter(|s| !s.in_script && s.name != "PING")
        .map(|s| s.name.as_str())
        .collect()
}

/// A handle over one node, warmed up (its scripts loaded, a first cycle on another resource).
async fn warm(nodes: &RedisNodes, builder: redlock_core::RedlockBuilder) -> Redlock {
    let redlock = builder.nodes(nodes.urls()).build().await.unwrap();
    redlock
        .lock("warm-up")
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    redlock
}

#[test]
fn the_monitor_parser_reads_names_and_script_lines_and_refuses_others() {
    let script = parse(r#"1733390000.123456 [0 lua] "set" "k" "t" "NX" "PX" "30000""#);
    assert_eq!(
        script,
        Some(Seen {
            name: "SET".into(),
            in_script: true,
            args: r#""k" "t" "NX" "PX" "30000""#.into(),
        })
    );
    let sent = parse(r#"1733390000.123456 [0 127.0.0.1:50000] "EVALSHA" "abc" "1" "k""#);
    assert_eq!(
        sent,
        Some(Seen {
            name: "EVALSHA".into(),
            in_script: false,
            args: r#""abc" "1" "k""#.into(),
        })
    );
    assert_eq!(parse("+OK"), None);
    assert_eq!(parse("1733390000.1 [0 lua]"), None);
}

/// The plain uncontended cycle runs the floor's commands, nothing else: the node's own `SET NX
/// PX` (with `GET`, which names the holder when it is refused), then the release's read and
/// `DEL` in its script. With hand-over on (the default), the read is an `MGET` that takes the
/// listen flag beside the key (which is not there: nobody waits).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_uncontended_cycle_runs_the_floors_commands_and_nothing_else() {
    let nodes = RedisNodes::start(1);
    for (builder, read) in [
        (Redlock::builder(), "MGET"),
        (Redlock::builder().handover_grace(Duration::ZERO), "GET"),
    ] {
        let redlock = warm(&nodes, builder).await;
        let monitor = Monitor::start(&nodes.urls()[0]).await;
        let seen = monitor
            .trace(async {
                let guard = redlock.lock("order:42").await.unwrap();
                assert!(guard.release().await.unwrap().was_held());
            })
            .await;
        assert_eq!(in_scripts(&seen), [read, "DEL"], "{seen:#?}");
        assert_eq!(sent(&seen), ["SET", "EVALSHA"], "{seen:#?}");
        // The spec's `SET key token NX PX ttl`, and the `DEL` of the key alone.
        let set = seen.iter().find(|s| s.name == "SET").unwrap();
        assert!(set.args.starts_with(r#""order:42" ""#), "{set:?}");
        assert!(set.args.ends_with(r#""PX" "30000" "NX" "GET""#), "{set:?}");
        let del = seen.iter().find(|s| s.name == "DEL").unwrap();
        assert_eq!(del.args, r#""order:42""#, "{del:?}");
        let read = seen.iter().find(|s| s.name == read).unwrap();
        let listen = match read.name.as_str() {
            "MGET" => r#""order:42" "order:42\x00redlock:listen""#,
            _ => r#""order:42""#,
        };
        assert_eq!(read.args, listen, "{read:?}");
    }
}

/// Each primitive's cycle runs no command beyond its list (a contended plain lock: the
/// queue, the listen flag, the streak and the hand-over message).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_primitive_runs_only_its_own_commands() {
    let nodes = RedisNodes::start(1);
    let redlock = warm(&nodes, Redlock::builder()).await;
    let labelled = warm(&nodes, Redlock::builder().owner("svc")).await;
    let ttl = Duration::from_secs(10);
    let url = nodes.urls()[0].clone();
    let check = |what: &str, seen: &[Seen], list: &[&str]| {
        let ran: BTreeSet<&str> = in_scripts(seen).into_iter().collect();
        let allowed: BTreeSet<&str> = list.iter().copied().collect();
        let extra: Vec<_> = ran.difference(&allowed).collect();
        assert!(
            extra.is_empty(),
            "{what} ran {extra:?} beyond its list: {seen:#?}"
        );
        assert!(!ran.is_empty(), "{what} ran nothing: {seen:#?}");
    };

    let seen = trace_of(&url, async {
        let guard = redlock
            .lock_with("fenced", &LockOptions::default().fencing(true))
            .await
            .unwrap();
        guard.release().await.unwrap();
    })
    .await;
    check(
        "a fenced lock",
        &seen,
        &["SET", "GET", "MGET", "DEL", "PTTL"],
    );

    // The label goes with the attempt, in the same call: one call per step, as without one.
    let seen = trace_of(&url, async {
        let guard = labelled.lock("labelled").await.unwrap();
        guard.release().await.unwrap();
    })
    .await;
    check("an owner label", &seen, &["SET", "GET", "MGET", "DEL"]);
    assert_eq!(sent(&seen), ["EVALSHA", "EVALSHA"], "{seen:#?}");
    let sets: Vec<&Seen> = seen.iter().filter(|s| s.name == "SET").collect();
    assert!(
        matches!(sets.as_slice(), [lock, label]
            if lock.args.starts_with(r#""labelled" ""#)
                && label.args.starts_with(r#""labelled\x00redlock:owner:"#)
                && label.args.contains(r#""svc""#)),
        "{sets:#?}"
    );

    let seen = trace_of(&url, async {
        let guard = redlock
            .lock_mode("moded", Mode::ProtectedRead, ttl)
            .await
            .unwrap();
        guard.release().await.unwrap();
    })
    .await;
    check(
        "a lock in a mode",
        &seen,
        &[
            "TYPE",
            "EXISTS",
            "TIME",
            "HGETALL",
            "HGET",
            "HSET",
            "HDEL",
            "PEXPIREAT",
            "ZCARD",
        ],
    );

    let seen = trace_of(&url, async {
        let permit = redlock
            .semaphore("pool", 2)
            .acquire_with(&LockOptions::default())
            .await
            .unwrap();
        permit.release().await.unwrap();
    })
    .await;
    check(
        "a permit",
        &seen,
        &[
            "TIME",
            "ZREMRANGEBYSCORE",
            "ZRANGE",
            "GET",
            "SET",
            "ZRANGEBYSCORE",
            // The release's read of the slot and its listen flag.
            "MGET",
            "DEL",
            // The semaphore's stored number of permits, kept as long as its slots.
            "PTTL",
            // Whether any waiter has a liveness entry: without one, no ranking.
            "EXISTS",
        ],
    );

    let seen = trace_of(&url, async {
        let both = redlock.lock_many(&["a", "b"]).await.unwrap();
        both.release().await.unwrap();
    })
    .await;
    check("a lock of several", &seen, &["SET", "GET", "DEL"]);

    // Contended: b waits for a's lock, a's release hands it over.
    let waiter = redlock.clone();
    let seen = trace_of(&url, async {
        let held = redlock.lock("contended").await.unwrap();
        let waiting = tokio::spawn(async move { waiter.lock("contended").await });
        within("the waiter to queue", async {
            while nodes.queued(&redlock.key_for("contended")).await[0] < 1 {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
        .await;
        held.release().await.unwrap();
        let next = within("the hand-over", waiting).await.unwrap().unwrap();
        next.release().await.unwrap();
    })
    .await;
    check(
        "a contended lock",
        &seen,
        &[
            "SET", "GET", "MGET", "DEL", "PTTL", "ZCARD", "ZADD", "PEXPIRE", "ZPOPMIN", "ZRANGE",
            "ZREM", "TIME", "PUBLISH",
        ],
    );
    // The contended cycle did hand over: the release found the listen flag.
    assert!(in_scripts(&seen).contains(&"ZPOPMIN"), "{seen:#?}");
}

/// Plain attempts made while a node's pipeline holds calls not yet sent join their batch: the
/// node runs their `SET NX PX GET` inside the batch's script, and gets no native `SET` between
/// the batches. On a current-thread runtime, in one tick: the releases first (the first goes
/// out alone, the node being idle; the rest wait in the pipeline), then the attempts, which
/// find those calls waiting.
#[tokio::test]
async fn plain_attempts_made_while_calls_wait_join_their_batch() {
    const LOCKERS: usize = 16;
    let nodes = RedisNodes::start(1);
    let redlock = warm(&nodes, Redlock::builder()).await;
    let mut held = Vec::new();
    for i in 0..LOCKERS {
        held.push(redlock.lock(&format!("held:{i}")).await.unwrap());
    }
    let monitor = Monitor::start(&nodes.urls()[0]).await;
    let mut guards = Vec::new();
    let seen = monitor
        .trace(async {
            let releases: Vec<_> = held
                .into_iter()
                .map(|guard| tokio::spawn(guard.release()))
                .collect();
            let attempts: Vec<_> = (0..LOCKERS)
                .map(|i| {
                    let redlock = redlock.clone();
                    tokio::spawn(async move { redlock.lock(&format!("new:{i}")).await })
                })
                .collect();
            for release in releases {
                assert!(release.await.unwrap().unwrap().was_held());
            }
            for attempt in attempts {
                guards.push(attempt.await.unwrap().unwrap());
            }
        })
        .await;
    assert!(guards.iter().all(|g| g.is_valid()));
    // The release sent alone, then one batch: the other releases and every attempt.
    assert_eq!(sent(&seen), ["EVALSHA", "EVALSHA"], "{seen:#?}");
    let sets: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.in_script && s.name == "SET")
        .collect();
    assert_eq!(sets.len(), LOCKERS, "{seen:#?}");
    for set in sets {
        assert!(set.args.starts_with(r#""new:"#), "{set:?}");
        assert!(set.args.ends_with(r#""NX" "PX" "30000" "GET""#), "{set:?}");
    }
}
