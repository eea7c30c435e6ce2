//! The configurations checked: small systems whose every state is explored, each aimed at
//! properties, and for each property a known-bad variant (a flaw switched on) that the
//! checker must reject.

use super::config::{ClientFlaws, Config, Faults, Program};
use super::run::Search;
use redlock_core::Mode;

use crate::node::Flaws;

/// The properties, as the model names them.
pub mod property {
    /// No two clients' views claim a valid lock at once in modes that conflict (a plain lock
    /// conflicts with every holder).
    pub const EXCLUSION: &str = "no two valid holders";
    /// Another application's key at the resource's name is never deleted or changed.
    pub const FOREIGN_KEY: &str = "no key of a foreign client deleted or changed";
    /// Confirmed fencing tokens only grow, while fewer than 2F − N nodes lost data.
    pub const FENCING: &str = "fencing tokens increase while fewer than 2F - N nodes lost data";
    /// Under fair scheduling, every client that waits for the lock holds it by the horizon.
    pub const EVERY_LOCKER: &str = "every locker holds the lock in time";
    /// Under fair scheduling, a skip-if-busy tick runs on some client.
    pub const TICK_RUNS: &str = "a skip-if-busy tick runs somewhere";
    /// Under fair scheduling, a plain waiter whose acquisition is over (granted, or given
    /// up) has no entry left in any node's queue, where it would hold up hand-overs.
    pub const QUEUE_LEFT: &str = "a waiter whose acquisition is over has left every queue";
}

pub use super::system::witness;

/// Every [`witness`] a scenario can expect.
pub const WITNESSES: [&str; 6] = [
    witness::GRANTED,
    witness::EXTENDED,
    witness::NAMED,
    witness::REVOTED,
    witness::AFTER_LOSS,
    witness::GAVE_UP_QUEUED,
];

/// One exploration and what it must find.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The configuration.
    pub config: Config,
    /// `None`: every property holds. `Some(property)`: a known-bad variant, which must
    /// violate that property; or, for a [`witness`], a variant in which no state satisfies
    /// it (the witness is shown to be able to miss).
    pub rejects: Option<&'static str>,
    /// The [`witness`]es the exploration must satisfy in some state (with `rejects: None`):
    /// what the scenario is about is reached, not only never violated.
    pub witnesses: Vec<&'static str>,
    /// A known-bad variant whose counterexample lies deep in a large space: searched depth
    /// first (any counterexample, in little memory) rather than breadth first (a shortest).
    pub depth_first: bool,
}

impl Scenario {
    /// How it is explored: a design, or a witness's negative control, in every state; a
    /// known-bad variant until its first violation (depth first when marked so).
    pub fn search(&self) -> Search {
        match self.rejects {
            Some(property) if !WITNESSES.contains(&property) => {
                if self.depth_first {
                    Search::AnyViolation
                } else {
                    Search::FirstViolation
                }
            }
            _ => Search::Exhaustive,
        }
    }
}

/// The witnesses a design's exploration of `config` must satisfy: a grant always; a
/// confirmed extension that moves the validity for a lengthening extension; a waiter named
/// by a release with hand-over (a waiter that does not give up by design); a queued waiter
/// giving up where one may; a node granting again after it lost its data, where the
/// scenario's horizon reaches the end of the quarantine.
///
/// With another application's hash at the key nothing can be granted (the lock refuses a
/// key it did not write): that scenario's attempts are shown to reach the script by its
/// known-bad variant instead, which takes the hash.
pub fn witnesses(config: &Config) -> Vec<&'static str> {
    let mut expected = Vec::new();
    if !config.foreign_hash {
        expected.push(witness::GRANTED);
    }
    let extender = config
        .clients
        .iter()
        .any(|c| c.extend_to.is_some_and(|t| t >= config.ttl));
    if extender {
        expected.push(witness::EXTENDED);
    }
    // A waiter that gives up queued may be gone before any release (the give-up scenario's).
    if config.clients.iter().any(|c| c.handover && !c.may_give_up) {
        expected.push(witness::NAMED);
    }
    // Nodes start with their data witness written: one that lost its data refuses for the
    // quarantine, then grants again, within the horizon when it reaches the quarantine's end.
    let losses = config.faults.restarts + config.faults.data_losses > 0;
    if losses && config.horizon >= config.quarantine {
        expected.push(witness::REVOTED);
    }
    if config.faults.lose_messages && !config.foreign_hash {
        expected.push(witness::AFTER_LOSS);
    }
    if config.clients.iter().any(|c| c.handover && c.may_give_up) {
        expected.push(witness::GAVE_UP_QUEUED);
    }
    expected
}

/// The base every scenario starts from: 3 nodes, a 3 ms ttl, a 1 ms drift allowance, no
/// faults, an adversarial scheduler, horizon 5 ms.
fn base(name: &'static str, clients: Vec<Program>) -> Config {
    Config {
        name,
        nodes: 3,
        clients,
        ttl: 3,
        drift: 1,
        quarantine: 3,
        retry_delay: 1,
        grace: 2,
        window_every: 0,
        window: 0,
        faults: Faults::default(),
        fair: false,
        horizon: 5,
        flaws: Flaws::default(),
        client_flaws: ClientFlaws::default(),
        foreign_hash: false,
        promises_exclusion: true,
    }
}

const ONCE: Program = Program {
    attempts: 1,
    ..Program::PLAIN
};

/// Two lockers, node clocks that may run 1 ms fast.
pub fn clock_drift() -> Config {
    let mut config = base("exclusion, node clocks running fast", vec![ONCE, ONCE]);
    config.faults.clock_skew = 1;
    config.horizon = 3;
    config
}

/// Two lockers, a node restarted empty (the quarantine on).
pub fn restart() -> Config {
    let mut config = base("exclusion, a node restarted empty", vec![ONCE, ONCE]);
    config.faults.restarts = 1;
    config.horizon = 3;
    config
}

/// Two lockers, a node losing its data without a restart (the quarantine on).
pub fn data_loss() -> Config {
    let mut config = base("exclusion, a node losing its data", vec![ONCE, ONCE]);
    config.faults.data_losses = 1;
    config.horizon = 3;
    config
}

/// Two lockers, lost and delayed messages, a retry each.
pub fn lost_messages() -> Config {
    let mut config = base("exclusion, lost requests and replies", vec![ONCE, ONCE]);
    config.faults.lose_messages = true;
    config.horizon = 3;
    config
}

/// A locker that extends its lock to a shorter ttl than it has left, and one more locker.
pub fn short_extension() -> Config {
    let extender = Program {
        extend_to: Some(1),
        ..ONCE
    };
    let mut config = base(
        "exclusion, an extension to a shorter ttl",
        vec![extender, ONCE],
    );
    config.ttl = 4;
    config.quarantine = 4;
    config.horizon = 3;
    config
}

/// A locker that extends its lock to its full ttl again a moment after the grant (so the
/// validity moves forward), and one more locker (the soak adds node clocks running fast).
pub fn long_extension() -> Config {
    let extender = Program {
        extend_to: Some(3),
        ..ONCE
    };
    let mut config = base(
        "exclusion, an extension that moves the validity forward",
        vec![extender, ONCE],
    );
    config.horizon = 4;
    config
}

/// One locker alone: the smallest run in which a lock is granted (the witness of a grant,
/// beside its negative control).
pub fn solo() -> Config {
    let mut config = base("a locker alone", vec![ONCE]);
    config.horizon = 3;
    config
}

/// Two fenced lockers, a node restarted empty (without the quarantine, which fencing tokens
/// do not rely on; the lock's exclusion does, so it is not checked here), at the default
/// fencing quorum (3 of 3).
pub fn fencing() -> Config {
    let fenced = Program {
        fencing: true,
        ..ONCE
    };
    let mut config = base(
        "fencing tokens, a node restarted empty",
        vec![fenced, fenced],
    );
    config.faults.restarts = 1;
    config.quarantine = 0;
    config.promises_exclusion = false;
    config.horizon = 1;
    config
}

/// [`fencing`] with two nodes restarted empty: still fewer than 2F − N = 3 of 3.
pub fn fencing_two_restarts() -> Config {
    let mut config = fencing();
    config.name = "fencing tokens, two nodes restarted empty";
    config.faults.restarts = 2;
    config
}

/// Two lockers with hand-over, each waiting up to 4 attempts, under fair scheduling; their
/// fallback timers fire past the horizon, so a waiter gets in by the hand-over alone.
pub fn handover() -> Config {
    let waiter = Program {
        attempts: 4,
        handover: true,
        ..Program::PLAIN
    };
    let mut config = base(
        "liveness, a released lock handed to its waiter",
        vec![waiter, waiter],
    );
    config.fair = true;
    config.horizon = 6;
    // The fallback timer fires past the horizon: only the hand-over lets the waiter in.
    config.retry_delay = 10;
    config
}

/// Two lockers with hand-over, each holding the lock 3 ms and attempting twice, under fair
/// scheduling: the one refused queues, and its second attempt ends while the other still
/// holds, so it gives up queued. It must leave every node's queue, where its entry would hold
/// up the hand-overs of the waiters after it.
pub fn waiter_gives_up() -> Config {
    let waiter = Program {
        attempts: 2,
        handover: true,
        hold: 3,
        may_give_up: true,
        ..Program::PLAIN
    };
    let mut config = base(
        "liveness, a queued waiter that gives up leaves the queue",
        vec![waiter, waiter],
    );
    config.fair = true;
    // A validity longer than the hold (5 − 1 ms of drift, less the attempt's time).
    config.ttl = 5;
    config.quarantine = 5;
    config.horizon = 5;
    config
}

/// Two lockers with hand-over, each waiting up to 2 attempts, under the adversarial
/// scheduler with lost requests and replies: exclusion with the waiter queue, reservations
/// and queued attempts in play (a 1 ms horizon: at 3 ms the exploration does not finish
/// within minutes). Explored by [`deeper`].
pub fn handover_faults() -> Config {
    let waiter = Program {
        attempts: 2,
        handover: true,
        ..Program::PLAIN
    };
    let mut config = base(
        "exclusion, hand-over with lost requests and replies",
        vec![waiter, waiter],
    );
    config.faults.lose_messages = true;
    config.horizon = 1;
    config
}

/// Three replicas firing a skip-if-busy job at the same tick, under fair scheduling: one
/// attempt each, then at most 1 attempt after a split vote (random delays of 1 or 2 ms; the
/// soak allows 2).
pub fn skip_tick() -> Config {
    let skipper = Program {
        attempts: 1,
        split_retries: 1,
        skip_if_busy: true,
        ..Program::PLAIN
    };
    let mut config = base(
        "liveness, a skip-if-busy tick on three replicas",
        vec![skipper, skipper, skipper],
    );
    config.fair = true;
    config.horizon = 5;
    config
}

/// Not explored by [`all`] nor [`deeper`]: at this size (three clients under fair
/// scheduling) the exploration does not finish within minutes. Kept for runs by hand
/// (`cargo run --release -p redlock-model --example one -- "foreign poller"`).
///
/// Two of our lockers handing the lock to each other (each holds it 1 ms, twice: 4 ms of
/// hand-overs, to the horizon), and a foreign client polling with `SET NX` every ms, under fair scheduling, with
/// windows for foreign clients (one of 2 ms after 2 ms busy).
pub fn foreign_poller() -> Config {
    let ours = Program {
        attempts: 20,
        handover: true,
        rounds: 2,
        hold: 1,
        ..Program::PLAIN
    };
    let foreign = Program {
        attempts: 20,
        foreign: true,
        ..Program::PLAIN
    };
    let mut config = base(
        "liveness, a foreign poller beside our hand-overs",
        vec![ours, ours, foreign],
    );
    config.fair = true;
    config.window_every = 2;
    config.window = 2;
    config.horizon = 4;
    config
}

/// A reader (PR) and a writer (PW) on a resource held in modes (the soak adds node clocks
/// running fast).
pub fn modes() -> Config {
    let reader = Program {
        mode: Some(Mode::ProtectedRead),
        ..ONCE
    };
    let writer = Program {
        mode: Some(Mode::ProtectedWrite),
        ..ONCE
    };
    let mut config = base("modes, a reader and a writer", vec![reader, writer]);
    config.horizon = 3;
    config
}

/// A reader and an exclusive holder on nodes where another application keeps a hash at the
/// resource's key.
pub fn foreign_key() -> Config {
    let reader = Program {
        mode: Some(Mode::ProtectedRead),
        ..ONCE
    };
    let exclusive = Program {
        mode: Some(Mode::Exclusive),
        ..ONCE
    };
    let mut config = base(
        "a foreign application's hash at the key",
        vec![reader, exclusive],
    );
    config.foreign_hash = true;
    config.horizon = 3;
    config
}

/// Every scenario: the design as it is, which must satisfy every property, and the
/// known-bad variants, each of which must violate its property.
pub fn all() -> Vec<Scenario> {
    let ok = |config: Config| Scenario {
        witnesses: witnesses(&config),
        config,
        rejects: None,
        depth_first: false,
    };
    let bad = |name, mut config: Config, flaw: fn(&mut Config), property| {
        config.name = name;
        flaw(&mut config);
        Scenario {
            config,
            rejects: Some(property),
            witnesses: Vec::new(),
            depth_first: false,
        }
    };
    use property::{EVERY_LOCKER, EXCLUSION, FENCING, FOREIGN_KEY, QUEUE_LEFT, TICK_RUNS};
    vec![
        ok(clock_drift()),
        bad(
            "known bad: a validity without the drift allowance",
            clock_drift(),
            |c| c.client_flaws.no_drift = true,
            EXCLUSION,
        ),
        ok(restart()),
        bad(
            "known bad: a restarted node without the quarantine",
            restart(),
            |c| c.quarantine = 0,
            EXCLUSION,
        ),
        ok(data_loss()),
        bad(
            "known bad: a node losing its data without the quarantine",
            data_loss(),
            |c| c.quarantine = 0,
            EXCLUSION,
        ),
        ok(lost_messages()),
        ok(short_extension()),
        bad(
            "known bad: an extension that shortens the keys",
            short_extension(),
            |c| c.flaws.shortening_extend = true,
            EXCLUSION,
        ),
        bad(
            "known bad: views that outlive the release",
            base("", vec![ONCE, ONCE]),
            |c| c.client_flaws.views_outlive_release = true,
            EXCLUSION,
        ),
        ok(long_extension()),
        // The design the first variant below changes, as it runs it (the second's, with fast
        // clocks, is the soak's: its 4 ms exploration holds every state of 3 ms).
        ok(Config {
            name: "exclusion, an extension that moves the validity, without fast clocks or drift",
            drift: 0,
            ..long_extension()
        }),
        Scenario {
            depth_first: true,
            ..bad(
                "known bad: an extension's validity counted from its reply",
                long_extension(),
                // Without a drift allowance to hide 1 ms of it (no node clock runs fast).
                |c| {
                    c.client_flaws.extension_from_reply = true;
                    c.drift = 0;
                },
                EXCLUSION,
            )
        },
        Scenario {
            depth_first: true,
            ..bad(
                "known bad: an extension's validity without the drift allowance",
                long_extension(),
                // A node clock running fast is what the allowance is for; 3 ms are enough.
                |c| {
                    c.client_flaws.extension_without_drift = true;
                    c.faults.clock_skew = 1;
                    c.horizon = 3;
                },
                EXCLUSION,
            )
        },
        ok(solo()),
        // Each witness's negative control: a variant in which it cannot be reached.
        bad(
            "control: a drift allowance as long as the ttl (nothing is ever granted)",
            solo(),
            |c| c.drift = c.ttl,
            witness::GRANTED,
        ),
        bad(
            "control: an extension to a shorter ttl (the validity never moves forward)",
            short_extension(),
            |_| {},
            witness::EXTENDED,
        ),
        bad(
            "control: waiters without hand-over (no release names one)",
            handover(),
            |c| {
                for client in &mut c.clients {
                    client.handover = false;
                }
            },
            witness::NAMED,
        ),
        bad(
            "control: the same lockers with nothing lost (no grant follows a loss)",
            lost_messages(),
            |c| c.faults.lose_messages = false,
            witness::AFTER_LOSS,
        ),
        bad(
            "control: a quarantine past the horizon (a node that lost its data never grants)",
            restart(),
            |c| c.quarantine = c.horizon + 1,
            witness::REVOTED,
        ),
        ok(modes()),
        bad(
            "known bad: a mode request with a wrong compatibility list",
            modes(),
            |c| c.client_flaws.wrong_compatibility = true,
            EXCLUSION,
        ),
        ok(foreign_key()),
        bad(
            "known bad: a mode script that takes a foreign hash",
            foreign_key(),
            |c| c.flaws.mode_takes_foreign_hash = true,
            FOREIGN_KEY,
        ),
        ok(fencing()),
        ok(fencing_two_restarts()),
        bad(
            "known bad: a fencing write-back at a bare majority",
            fencing(),
            |c| c.client_flaws.majority_fencing_quorum = true,
            FENCING,
        ),
        ok(handover()),
        bad(
            "known bad: a waiter granted by some nodes stays queued on the others",
            handover(),
            |c| c.client_flaws.stays_queued = true,
            QUEUE_LEFT,
        ),
        bad(
            "known bad: a listener that drops messages during an attempt",
            handover(),
            |c| c.client_flaws.listener_drops_messages = true,
            EVERY_LOCKER,
        ),
        bad(
            "known bad: a waiter that only listens",
            handover(),
            |c| c.client_flaws.waiter_only_listens = true,
            EVERY_LOCKER,
        ),
        ok(waiter_gives_up()),
        bad(
            "known bad: a waiter that gives up stays queued",
            waiter_gives_up(),
            |c| c.client_flaws.give_up_stays_queued = true,
            QUEUE_LEFT,
        ),
        bad(
            "control: the same lockers without hand-over (nobody queues to give up)",
            waiter_gives_up(),
            |c| {
                for client in &mut c.clients {
                    client.handover = false;
                }
            },
            witness::GAVE_UP_QUEUED,
        ),
        ok(skip_tick()),
        bad(
            "known bad: a split vote reported as busy",
            skip_tick(),
            |c| c.client_flaws.split_is_busy = true,
            TICK_RUNS,
        ),
    ]
}

/// The designs of [`all`] explored further (minutes, for the soak): longer horizons, a
/// retry each, and faults combined.
pub fn deeper() -> Vec<Scenario> {
    let ok = |name, mut config: Config, grow: fn(&mut Config)| {
        config.name = name;
        grow(&mut config);
        Scenario {
            witnesses: witnesses(&config),
            config,
            rejects: None,
            depth_first: false,
        }
    };
    vec![
        ok(
            "deeper: hand-over with lost requests and replies, 1 ms",
            handover_faults(),
            |_| {},
        ),
        ok(
            "deeper: node clocks running fast, 5 ms",
            clock_drift(),
            |c| {
                c.horizon = 5;
            },
        ),
        ok("deeper: a node restarted empty, 5 ms", restart(), |c| {
            c.horizon = 5;
        }),
        ok("deeper: lost messages, a retry", lost_messages(), |c| {
            c.clients[0] = Program::PLAIN;
        }),
        ok(
            "deeper: an extension to a shorter ttl, 4 ms",
            short_extension(),
            |c| {
                c.horizon = 4;
            },
        ),
        ok(
            "deeper: a restart and fast clocks, a retry each",
            restart(),
            |c| {
                c.faults.clock_skew = 1;
                c.clients = vec![Program::PLAIN, Program::PLAIN];
            },
        ),
        ok(
            "deeper: an extension that moves the validity, fast clocks",
            long_extension(),
            |c| c.faults.clock_skew = 1,
        ),
        ok("deeper: fencing tokens, 3 ms", fencing(), |c| c.horizon = 3),
        ok("deeper: modes, fast node clocks, 4 ms", modes(), |c| {
            c.faults.clock_skew = 1;
            c.horizon = 4;
        }),
        ok(
            "deeper: a skip-if-busy tick, 2 split retries",
            skip_tick(),
            |c| {
                for client in &mut c.clients {
                    client.split_retries = 2;
                }
                c.horizon = 8;
            },
        ),
    ]
}
