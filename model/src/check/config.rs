//! What one exploration checks: the system's size, the clients' programs, the faults the
//! checker may inject, the scheduling, and the flaws (known-bad variants) switched on.

use redlock_core::Mode;

use crate::node::Flaws;

/// What one client does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Program {
    /// Attempts before giving up (the first one and `retry_count` retries).
    pub attempts: u8,
    /// After a split vote, attempts again after a random delay, at most this many times
    /// beyond `attempts` (the lock's split retries); 0: a split vote is an error at once.
    pub split_retries: u8,
    /// Once held, extends the lock once, to this ttl (ms), before releasing it.
    pub extend_to: Option<u64>,
    /// Asks for a fencing token (the write-back at the fencing quorum after the grant).
    pub fencing: bool,
    /// Hand-over on: a refused waiter joins the waiter queue, releases hand the key to the
    /// longest waiter, and release messages wake waiters.
    pub handover: bool,
    /// Skip if busy: the job runs only if the lock is taken (a cron tick); with
    /// `attempts: 1`.
    pub skip_if_busy: bool,
    /// A foreign client (node-redlock, redis-py): `SET NX PX` on every node until it holds a
    /// quorum, then compare-and-delete; no queue, no windows, no quarantine.
    pub foreign: bool,
    /// Locks this many times in all, one after the other (a stream of lockers).
    pub rounds: u8,
    /// Holds each lock at least this long (ms) before releasing it.
    pub hold: u64,
    /// Locks in this mode (acquire_mode.lua, release_mode.lua) instead of a plain lock.
    pub mode: Option<Mode>,
    /// May give up by design (its attempts can end while another client holds the lock):
    /// not counted by the liveness property that every locker holds the lock in time.
    pub may_give_up: bool,
}

impl Program {
    /// A plain locker: one attempt and one retry, no extension, no fencing, no hand-over.
    pub const PLAIN: Self = Self {
        attempts: 2,
        split_retries: 0,
        extend_to: None,
        fencing: false,
        handover: false,
        skip_if_busy: false,
        foreign: false,
        rounds: 1,
        hold: 0,
        mode: None,
        may_give_up: false,
    };
}

/// The faults the checker may inject, each at most the given number of times in a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Faults {
    /// Messages (requests and replies) may be lost. Delays and reordering are always
    /// explored: any message in flight may be delivered next, and time may pass first.
    pub lose_messages: bool,
    /// Nodes restarted empty (a new run id: no persistence).
    pub restarts: u8,
    /// Nodes that lose their data without a restart (`FLUSHALL`).
    pub data_losses: u8,
    /// How far, in ms, each node's clock may run ahead of the clients' during a run (clock
    /// drift within the bound the clients subtract).
    pub clock_skew: u64,
}

/// Flaws on the clients' side, each a known-bad design the checker must reject.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct ClientFlaws {
    /// The validity does not subtract the drift allowance (ttl − elapsed only).
    pub no_drift: bool,
    /// A released lock's views keep claiming the validity it had (`is_valid` reading only
    /// `valid_until`).
    pub views_outlive_release: bool,
    /// A split vote is reported as busy: a skip-if-busy job skips.
    pub split_is_busy: bool,
    /// A waiter that joins the queue neither attempts again at once nor keeps a fallback
    /// timer: it waits for a hand-over message only.
    pub waiter_only_listens: bool,
    /// A waiter's listener drops the hand-over messages published while its waiter is not
    /// waiting (mid-attempt), instead of keeping them.
    pub listener_drops_messages: bool,
    /// Releases never open a window for foreign clients.
    pub no_windows: bool,
    /// A mode request names every mode as compatible with its own.
    pub wrong_compatibility: bool,
    /// A confirmed extension's validity is counted from its decision (the last reply heard)
    /// instead of from its first send.
    pub extension_from_reply: bool,
    /// A confirmed extension's validity does not subtract the drift allowance.
    pub extension_without_drift: bool,
    /// A fencing token is confirmed by a bare majority of the nodes instead of the lock's
    /// fencing quorum.
    pub majority_fencing_quorum: bool,
    /// A plain waiter never leaves the queue: not after a grant by only some nodes, nor when
    /// it gives up.
    pub stays_queued: bool,
    /// A plain waiter that gives up does not leave the queue (it still leaves after a grant
    /// by only some nodes).
    pub give_up_stays_queued: bool,
}

/// One exploration.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Config {
    /// What it checks, in a few words (printed with its results).
    pub name: &'static str,
    /// Nodes (N).
    pub nodes: usize,
    /// One program per client.
    pub clients: Vec<Program>,
    /// The lock's ttl, ms.
    pub ttl: u64,
    /// The drift allowance the clients subtract from the validity, ms.
    pub drift: u64,
    /// The quarantine after a node lost data, ms (0: off).
    pub quarantine: u64,
    /// The retry delay, ms (a random part is not modelled: the split retries' is).
    pub retry_delay: u64,
    /// How long a key handed over stays reserved for the named waiter, ms.
    pub grace: u64,
    /// Windows for foreign clients: a release that finds a waiter after the key has been busy
    /// this long (ms) opens a window of `window` ms instead of handing over; 0: off.
    pub window_every: u64,
    /// The window's length, ms.
    pub window: u64,
    /// The faults injected.
    pub faults: Faults,
    /// Fair scheduling: every message is delivered and every client acts before time
    /// passes (no faults then). Without it, the scheduler is adversarial: any message may
    /// wait, any client may pause, time may pass at any point.
    pub fair: bool,
    /// The run ends at this time (ms).
    pub horizon: u64,
    /// Flaws in the scripts.
    pub flaws: Flaws,
    /// Flaws in the clients.
    pub client_flaws: ClientFlaws,
    /// Whether exclusion is checked: not in a scenario outside the lock's fault model for it
    /// (a node restarted without the quarantine), which checks another property.
    pub promises_exclusion: bool,
    /// Every node starts with another application's hash at the resource's key (an
    /// application sharing the nodes without a key prefix).
    pub foreign_hash: bool,
}

impl Config {
    /// Nodes that must grant a lock: N / 2 + 1 (the lock's own arithmetic).
    pub fn quorum(&self) -> usize {
        redlock_core::model::quorum(self.nodes)
    }

    /// Nodes that must confirm a fencing token (F): the lock's own arithmetic, unless a
    /// known-bad variant asks for a bare majority.
    pub fn fencing_quorum(&self) -> usize {
        if self.client_flaws.majority_fencing_quorum {
            self.quorum()
        } else {
            redlock_core::model::fencing_quorum(self.nodes)
        }
    }
}
