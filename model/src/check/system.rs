//! The whole system as a stateright [`Model`]: its state, the actions the checker may take
//! from each state, and the properties.

use std::fmt::Write as _;

use redlock_core::Mode;
use stateright::{Model, Property};

use std::time::Duration;

use redlock_core::model::{self as lock, Next};

use super::client::{Client, Lease, Phase, Tally, Vote, ms, to_ms};
use super::config::Config;
use super::keys::{self, Req};
use crate::node::{Call, Node, Reply};

/// The name of the witness that some fair run got to its end (where the liveness properties
/// are evaluated).
pub(super) const RUN_ENDS: &str = "a fair run gets to its end";

/// The witnesses that a scenario reaches what it is about: each a `sometimes` property, which
/// the checker reports when some state satisfies it (see [`scenarios::witness`]).
///
/// [`scenarios::witness`]: super::scenarios::witness
pub(super) const WITNESSES: [&str; 7] = [
    RUN_ENDS,
    witness::GRANTED,
    witness::EXTENDED,
    witness::NAMED,
    witness::REVOTED,
    witness::AFTER_LOSS,
    witness::GAVE_UP_QUEUED,
];

/// The witnesses' names.
pub mod witness {
    /// Some client holds the lock.
    pub const GRANTED: &str = "a lock is granted";
    /// A confirmed extension moved a holder's validity past what its grant gave.
    pub const EXTENDED: &str = "an extension moves the validity forward";
    /// A release's hand-over message names a waiter that awaits it.
    pub const NAMED: &str = "a release names its waiter";
    /// A node that restarted or lost its data holds a client's lock again.
    pub const REVOTED: &str = "a node that lost its data grants again";
    /// A lock is granted to a client that lost a request or a reply of its own before.
    pub const AFTER_LOSS: &str = "a lock is granted after a lost message";
    /// A waiter queued for a hand-over gives up (its attempts end while another holds the
    /// lock).
    pub const GAVE_UP_QUEUED: &str = "a queued waiter gives up";
}

/// A message in flight. A node's reply reaches its client when the node runs the call (a
/// reply's delay is the client's: it decides at any time once it may); a lost reply is a
/// fault ([`Action::LoseReply`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Msg {
    /// A call from client `client` to node `node`; `op` tags the round its reply counts in
    /// (`None`: nobody waits for the reply: a release, a clean-up).
    Request {
        /// The sender.
        client: usize,
        /// The receiver.
        node: usize,
        /// The round.
        op: Option<u16>,
        /// The request.
        req: Req,
    },
    /// A hand-over message published on the queue's channel, to a subscribed client.
    Wake {
        /// The receiver.
        client: usize,
        /// The message.
        text: String,
    },
}

/// A node and its clock's skew.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NodeState {
    /// The node.
    pub node: Node,
    /// How far its clock runs ahead of the global one, ms.
    pub skew: u64,
    /// Restarts so far (names the run id).
    pub incarnation: u8,
}

/// The whole system at one point.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The global clock, ms.
    pub now: u64,
    /// The nodes.
    pub nodes: Vec<NodeState>,
    /// The clients.
    pub clients: Vec<Client>,
    /// Messages in flight: requests of one connection together, in the order sent; the
    /// groups and hand-over messages sorted.
    pub net: Vec<Msg>,
    /// Restarts injected.
    pub restarts: u8,
    /// Losses of data injected.
    pub data_losses: u8,
    /// Which nodes lost data (restart or loss), as a bit set.
    pub lost_data: u32,
    /// The highest fencing token confirmed so far.
    pub max_fence: u64,
    /// The clients that lost a request or a reply of their own, as a bit set.
    pub lost_by: u8,
    /// A lock was granted to a client after it lost a message of its own.
    pub granted_after_loss: bool,
    /// A fencing token was confirmed that was not above every token confirmed before its
    /// write-back began.
    pub fence_regressed: bool,
}

/// What the checker may do next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Deliver a message.
    Deliver(Msg),
    /// Lose a message: a request before the node runs it.
    Lose(Msg),
    /// Deliver a request, and lose the node's reply.
    LoseReply(Msg),
    /// One ms passes.
    Tick,
    /// A client takes its next step; `draw` is the random delay drawn after a split vote.
    Step {
        /// The client.
        client: usize,
        /// The delay drawn (ms), where the step draws one.
        draw: u8,
    },
    /// A node restarts empty.
    Restart(usize),
    /// A node loses its data.
    LoseData(usize),
    /// A node's clock jumps 1 ms ahead.
    Skew(usize),
}

/// The model: a configuration to explore.
#[derive(Debug, Clone)]
pub struct System {
    /// The configuration.
    pub config: Config,
}

/// A server's run id: by incarnation only, so that nodes stay interchangeable (a run id is
/// only ever compared with the same node's earlier one).
fn run_id(incarnation: u8) -> String {
    format!("{:036x}{incarnation:04x}", 0xab)
}

impl State {
    /// Whether the run is over: every client finished, or the horizon reached.
    pub fn over(&self, config: &Config) -> bool {
        self.now >= config.horizon
            || self
                .clients
                .iter()
                .all(|c| matches!(c.phase, Phase::Done { .. }))
    }

    /// The clients whose views claim a valid lock now.
    pub fn valid_holders(&self, config: &Config) -> Vec<usize> {
        (0..self.clients.len())
            .filter(|&c| self.clients[c].claims_valid(self.now, config))
            .collect()
    }

    /// Sends `msg`. Requests keep the order they were sent in on their connection (one per
    /// client and node, as the client's pipeline to a node is one connection); anything else
    /// is unordered.
    fn send(&mut self, msg: Msg) {
        if let Msg::Request { client, node, .. } = &msg {
            let (client, node) = (*client, *node);
            let at = self
                .net
                .iter()
                .rposition(|m| matches!(m, Msg::Request { client: c, node: n, .. } if *c == client && *n == node))
                .map_or_else(|| self.net.partition_point(|m| m < &msg), |last| last + 1);
            self.net.insert(at, msg);
            return;
        }
        let at = self.net.partition_point(|m| m < &msg);
        self.net.insert(at, msg);
    }

    /// Whether the message at `i` may be delivered now: a request when it is the oldest on
    /// its connection (one per client and node: requests arrive in the order sent); a
    /// hand-over message once its client waits for it (its listener keeps it until then).
    fn deliverable(&self, i: usize) -> bool {
        match &self.net[i] {
            Msg::Request { .. } => self.first_on_its_connection(i),
            Msg::Wake { client, .. } => {
                matches!(self.clients[*client].phase, Phase::AwaitingHandover { .. })
            }
        }
    }

    /// Whether the message at `i` is the oldest in flight on its connection.
    fn first_on_its_connection(&self, i: usize) -> bool {
        let Msg::Request { client, node, .. } = &self.net[i] else {
            return true;
        };
        !self.net[..i].iter().any(
            |m| matches!(m, Msg::Request { client: c, node: n, .. } if c == client && n == node),
        )
    }

    fn remove(&mut self, msg: &Msg) -> bool {
        match self.net.iter().position(|m| m == msg) {
            Some(at) => {
                self.net.remove(at);
                true
            }
            None => false,
        }
    }

    fn broadcast(&mut self, client: usize, op: Option<u16>, req: Req) {
        for node in 0..self.nodes.len() {
            self.send(Msg::Request {
                client,
                node,
                op,
                req,
            });
        }
    }
}

impl System {
    /// The model of `config`.
    pub fn new(config: Config) -> Self {
        Self { config }
    }

    /// Whether client `c` has a step it may take now (its `draw`s aside).
    fn step_enabled(&self, state: &State, c: usize) -> bool {
        let client = &state.clients[c];
        let q = self.config.quorum();
        let n = self.config.nodes;
        let timed_out = |started: u64| state.now >= started + self.config.ttl;
        match &client.phase {
            Phase::Idle { at } => state.now >= *at,
            Phase::Acquiring { started, votes }
            | Phase::Fencing {
                valid_until: started,
                votes,
                ..
            } => {
                let tally = Tally::of(votes);
                let pending = votes.iter().filter(|v| **v == Vote::Pending).count();
                // An attempt is decided at a quorum granted, else it hears every node out
                // (`Stop::AtQuorum`); a fencing write-back at its decision.
                let decided = if matches!(client.phase, Phase::Fencing { .. }) {
                    tally.decided(self.config.fencing_quorum(), n, pending)
                } else {
                    tally.granted >= q || pending == 0
                };
                decided || timed_out(*started)
            }
            Phase::AwaitingHandover { fallback, named } => {
                *named > 0 || fallback.is_some_and(|at| state.now >= at)
            }
            Phase::Holding(lease) => match &lease.extending {
                Some((started, votes)) => {
                    let pending = votes.iter().filter(|v| **v == Vote::Pending).count();
                    Tally::of(votes).decided(q, n, pending) || timed_out(*started)
                }
                None => {
                    let extends = client.program.extend_to.is_some() && !lease.extended;
                    extends || state.now >= lease.granted_at + client.program.hold
                }
            },
            Phase::Done { .. } => false,
        }
    }

    /// Whether the step of client `c` draws a split vote's delay.
    fn step_draws(&self, state: &State, c: usize) -> bool {
        let client = &state.clients[c];
        match &client.phase {
            Phase::Acquiring { started, votes } => {
                self.granted_until(state.now, *started, votes).is_none()
                    && client.draws_after(votes, &self.config)
            }
            _ => false,
        }
    }

    /// The validity end of an attempt started at `started` with `votes`, decided at `now`:
    /// `None` unless a quorum granted it with validity left (the lock's arithmetic).
    fn granted_until(&self, now: u64, started: u64, votes: &[Vote]) -> Option<u64> {
        let config = &self.config;
        if Tally::of(votes).granted < lock::quorum(config.nodes) {
            return None;
        }
        let (ttl, drift) = (ms(config.ttl), ms(Client::drift(config)));
        lock::valid_until(ms(started), ms(now), ttl, drift).map(to_ms)
    }

    /// The phase that follows client `c`'s failed attempt, as the lock's decision `next`
    /// says. A plain waiter that gives up leaves the queue it joined.
    fn after_failure(
        &self,
        state: &mut State,
        c: usize,
        client: &mut Client,
        next: Next,
        draw: u8,
    ) -> Phase {
        let now = state.now;
        let plain = client.program.mode.is_none();
        let flaws = &self.config.client_flaws;
        let leaves = !flaws.stays_queued && !flaws.give_up_stays_queued;
        if next == Next::GiveUp && client.listening() && plain {
            client.gave_up_queued = true;
            if leaves {
                state.broadcast(c, None, Req::Leave);
            }
        }
        match next {
            Next::Retry(delay) => Phase::Idle {
                at: now + to_ms(delay),
            },
            Next::JoinQueue => Phase::Idle { at: now },
            Next::AwaitHandover(fallback) => Phase::AwaitingHandover {
                fallback: (fallback != Duration::MAX).then(|| now + to_ms(fallback)),
                named: 0,
            },
            Next::SplitRetry(spread) => {
                let draw = u64::from(draw).min(to_ms(spread));
                client.draws.push(u8::try_from(draw).unwrap_or(u8::MAX));
                Phase::Idle { at: now + draw }
            }
            Next::GiveUp => {
                // The acquisition is over: its listener goes, as the lock's does.
                client.decision = lock::Decision::default();
                Phase::Done {
                    released_until: None,
                }
            }
        }
    }

    /// Client `c`'s next step.
    fn step(&self, state: &mut State, c: usize, draw: u8) {
        let config = &self.config;
        let q = config.quorum();
        let now = state.now;
        let mut client = state.clients[c].clone();
        let phase = client.phase.clone();
        match phase {
            Phase::Idle { .. } => {
                let attempts = client.decision.begin_attempt();
                if attempts == 1 && client.decision.split_retries() == 0 {
                    client.wait_start = now;
                }
                client.tokens += 1;
                client.op += 1;
                let req = if client.program.mode.is_some() {
                    Req::AcquireMode {
                        token: client.tokens,
                        since: client.wait_start,
                    }
                } else {
                    Req::Acquire {
                        token: client.tokens,
                        queued: client.listening().then_some(client.wait_start),
                    }
                };
                state.broadcast(c, Some(client.op), req);
                client.phase = Phase::Acquiring {
                    started: now,
                    votes: vec![Vote::Pending; config.nodes],
                };
            }
            Phase::Acquiring { started, votes } => {
                let token = client.tokens;
                if let Some(valid_until) = self.granted_until(now, started, &votes) {
                    client.op += 1;
                    let (hint, busy) = votes.iter().fold((0, 0), |(h, b), v| match v {
                        Vote::Granted { hint, busy } => (h.max(*hint), b.max(*busy)),
                        _ => (h, b),
                    });
                    let everywhere = votes.iter().all(|v| matches!(v, Vote::Granted { .. }));
                    if client.program.fencing {
                        let claim = hint + 1;
                        state.broadcast(c, Some(client.op), Req::Fence { claim });
                        client.phase = Phase::Fencing {
                            valid_until,
                            claim,
                            votes: vec![Vote::Pending; config.nodes],
                            at_nodes: 0,
                            floor: state.max_fence,
                            everywhere,
                        };
                    } else {
                        client.phase = Phase::Holding(Lease {
                            valid_until,
                            lost: false,
                            fence: None,
                            granted_at: now,
                            busy,
                            extending: None,
                            extended: false,
                        });
                        client.holds += 1;
                        state.granted_after_loss |= state.lost_by >> c & 1 == 1;
                        self.finish_acquisition(state, c, &mut client, everywhere);
                    }
                } else {
                    // Step 5: release what the attempt took, on every node.
                    client.op += 1;
                    let next = client.after_failure(&votes, false, config);
                    let req = if client.program.mode.is_some() {
                        let leave = next == Next::GiveUp;
                        Req::ReleaseMode { token, leave }
                    } else {
                        Req::Release { token }
                    };
                    state.broadcast(c, None, req);
                    client.phase = self.after_failure(state, c, &mut client, next, draw);
                }
            }
            Phase::AwaitingHandover { .. } => client.phase = Phase::Idle { at: now },
            Phase::Fencing {
                valid_until,
                claim,
                votes,
                everywhere,
                ..
            } => {
                let confirmed = Tally::of(&votes).granted >= config.fencing_quorum();
                if confirmed && now < valid_until {
                    client.phase = Phase::Holding(Lease {
                        valid_until,
                        lost: false,
                        fence: Some(claim),
                        granted_at: now,
                        busy: 0,
                        extending: None,
                        extended: false,
                    });
                    client.holds += 1;
                    state.granted_after_loss |= state.lost_by >> c & 1 == 1;
                    self.finish_acquisition(state, c, &mut client, everywhere);
                } else {
                    // Too few confirmations: the lock is released and the attempt failed;
                    // the lock's decision says what follows.
                    client.op += 1;
                    state.broadcast(
                        c,
                        None,
                        Req::Release {
                            token: client.tokens,
                        },
                    );
                    let next = client.after_failure(&votes, true, config);
                    client.phase = self.after_failure(state, c, &mut client, next, draw);
                }
            }
            Phase::Holding(mut lease) => {
                let token = client.tokens;
                if let Some((started, votes)) = lease.extending.take() {
                    let tally = Tally::of(&votes);
                    let ttl = client.program.extend_to.unwrap_or(config.ttl);
                    if tally.granted >= q && !lease.lost && now < lease.valid_until {
                        let flaws = &config.client_flaws;
                        let from = if flaws.extension_from_reply {
                            now
                        } else {
                            started
                        };
                        let drift = if flaws.extension_without_drift {
                            0
                        } else {
                            Client::drift(config)
                        };
                        let until = lock::extended_until(ms(from), ms(ttl), ms(drift));
                        lease.valid_until = lease.valid_until.max(to_ms(until));
                    } else if tally.refused > config.nodes - q {
                        lease.lost = true;
                    }
                    client.phase = Phase::Holding(lease);
                } else if let (Some(ttl), false) = (client.program.extend_to, lease.extended) {
                    client.op += 1;
                    state.broadcast(c, Some(client.op), Req::Extend { token, ttl });
                    lease.extended = true;
                    lease.extending = Some((now, vec![Vote::Pending; config.nodes]));
                    client.phase = Phase::Holding(lease);
                } else {
                    let req = if client.program.mode.is_some() {
                        Req::ReleaseMode { token, leave: true }
                    } else if client.program.handover {
                        let busy = lease.busy + (now - lease.granted_at);
                        Req::ReleaseHandover { token, busy }
                    } else {
                        Req::Release { token }
                    };
                    client.op += 1;
                    state.broadcast(c, None, req);
                    client.phase = if client.holds < client.program.rounds {
                        Phase::Idle { at: now }
                    } else {
                        Phase::Done {
                            released_until: Some(lease.valid_until),
                        }
                    };
                }
            }
            Phase::Done { .. } => {}
        }
        state.clients[c] = client;
    }

    /// Client `c`'s acquisition is over, granted (by every node when `everywhere`): a
    /// plain waiter granted by only some nodes leaves the queue, and the next acquisition
    /// starts with a new loop state.
    fn finish_acquisition(
        &self,
        state: &mut State,
        c: usize,
        client: &mut Client,
        everywhere: bool,
    ) {
        let rules = client.rules(&self.config);
        let leaves = client.decision.leaves_queue_after_grant(&rules, everywhere);
        if leaves && !self.config.client_flaws.stays_queued {
            state.broadcast(c, None, Req::Leave);
        }
        client.decision = lock::Decision::default();
    }

    /// Node `n` runs a request.
    fn deliver_request(
        &self,
        state: &mut State,
        (client, n, op, req): (usize, usize, Option<u16>, Req),
        reply_heard: bool,
    ) {
        let call = req.call(&self.config, client, &state.clients[client].program);
        let now = state.now + state.nodes[n].skew;
        let node = &mut state.nodes[n].node;
        node.set_now(now);
        let reply = node.run(&call);
        let published = node.take_published();
        for (channel, text) in published {
            if channel != keys::QUEUE {
                continue;
            }
            for c in 0..state.clients.len() {
                let waiting = matches!(state.clients[c].phase, Phase::AwaitingHandover { .. });
                let dropped = self.config.client_flaws.listener_drops_messages && !waiting;
                if state.clients[c].listening() && !dropped {
                    state.send(Msg::Wake {
                        client: c,
                        text: text.clone(),
                    });
                }
            }
        }
        if let (Req::Fence { claim }, Some(1)) = (req, reply.int_at(0)) {
            self.count_confirmation(state, client, op, claim);
        }
        if let (Some(op), true) = (op, reply_heard) {
            self.deliver_reply(state, client, n, op, &reply);
        }
    }

    /// A node confirmed client `c`'s fencing claim: at the fencing quorum the token is
    /// confirmed, and must be above every token confirmed before its write-back began (the
    /// tokens are a linearizable counter: a claim that starts after another was confirmed
    /// is confirmed only above it; claims that overlap in time are in no order).
    fn count_confirmation(&self, state: &mut State, c: usize, op: Option<u16>, claim: u64) {
        let client = &mut state.clients[c];
        let Phase::Fencing {
            at_nodes, floor, ..
        } = &mut client.phase
        else {
            return;
        };
        if op != Some(client.op) {
            return;
        }
        *at_nodes += 1;
        if usize::from(*at_nodes) == self.config.fencing_quorum() {
            if claim <= *floor {
                state.fence_regressed = true;
            }
            state.max_fence = state.max_fence.max(claim);
        }
    }

    /// Client `c` counts a reply of round `op` from node `n`.
    fn deliver_reply(&self, state: &mut State, c: usize, n: usize, op: u16, reply: &Reply) {
        let client = &mut state.clients[c];
        if client.op != op {
            return;
        }
        match &mut client.phase {
            Phase::Acquiring { votes, .. } => votes[n] = Vote::of_acquire(reply),
            Phase::Fencing { votes, .. } => votes[n] = Vote::of_confirmation(reply),
            Phase::Holding(Lease {
                extending: Some((_, votes)),
                ..
            }) => votes[n] = Vote::of_confirmation(reply),
            _ => {}
        }
    }

    /// Client `c` receives a hand-over message.
    fn deliver_wake(&self, state: &mut State, c: usize, text: &str) {
        let now = state.now;
        let marker = keys::marker(c);
        let client = &mut state.clients[c];
        let Phase::AwaitingHandover { named, .. } = &mut client.phase else {
            return;
        };
        let mut words = text.split(' ');
        let first = words.next().unwrap_or_default();
        let window: u64 = words.nth(1).and_then(|w| w.parse().ok()).unwrap_or(0);
        if first == "*" || first == marker {
            if window > 0 {
                client.phase = Phase::Idle { at: now + window };
            } else {
                *named += 1;
            }
        }
    }

    /// Whether time may pass: always under an adversarial scheduler; under a fair one, only
    /// when nothing else can happen now.
    fn tick_enabled(&self, state: &State) -> bool {
        if state.now >= self.config.horizon {
            return false;
        }
        if !self.config.fair {
            return true;
        }
        (0..state.net.len()).all(|i| !state.deliverable(i))
            && (0..state.clients.len()).all(|c| !self.step_enabled(state, c))
    }

    /// A readable line for one step of a trace.
    pub fn describe(&self, state: &State, action: &Action) -> String {
        let t = state.now;
        match action {
            Action::Deliver(Msg::Request {
                client, node, req, ..
            }) => {
                let call = req.call(&self.config, *client, &state.clients[*client].program);
                let call = &call;
                let mut next = state.clone();
                let skew = next.nodes[*node].skew;
                next.nodes[*node].node.set_now(t + skew);
                let reply = next.nodes[*node].node.run(call);
                format!(
                    "t={t}: node {node} runs {} from client {client} -> {reply:?}",
                    call_name(call)
                )
            }
            Action::Deliver(Msg::Wake { client, text }) => {
                format!("t={t}: client {client} hears the hand-over message {text:?}")
            }
            Action::Lose(msg) => format!("t={t}: the network loses {msg:?}"),
            Action::LoseReply(msg) => format!("t={t}: {msg:?} runs, and its reply is lost"),
            Action::Tick => format!("t={t}: 1 ms passes"),
            Action::Step { client, draw } => {
                let c = &state.clients[*client];
                let what = match &c.phase {
                    Phase::Idle { .. } => {
                        format!("attempts (token {})", keys::token(*client, c.tokens + 1))
                    }
                    Phase::Acquiring { votes, .. } => format!("decides on its votes {votes:?}"),
                    Phase::AwaitingHandover { named: 0, .. } => {
                        "stops waiting (fallback timer)".into()
                    }
                    Phase::AwaitingHandover { .. } => "attempts, named by a release".into(),
                    Phase::Fencing { claim, votes, .. } => {
                        format!("decides on its fencing claim {claim}: {votes:?}")
                    }
                    Phase::Holding(lease) => match &lease.extending {
                        Some((_, votes)) => format!("decides on its extension: {votes:?}"),
                        None if c.program.extend_to.is_some() && !lease.extended => {
                            "extends".into()
                        }
                        None => format!("releases (valid until {})", lease.valid_until),
                    },
                    Phase::Done { .. } => "is done".into(),
                };
                let draw = if self.step_draws(state, *client) {
                    format!(" (draws {draw} ms)")
                } else {
                    String::new()
                };
                format!("t={t}: client {client} {what}{draw}")
            }
            Action::Restart(n) => format!("t={t}: node {n} restarts empty"),
            Action::LoseData(n) => format!("t={t}: node {n} loses its data"),
            Action::Skew(n) => format!("t={t}: node {n}'s clock jumps 1 ms ahead"),
        }
    }

    /// A readable trace of a path: one line per step, then who claims a valid lock.
    pub fn trace(&self, path: &[(State, Option<Action>)]) -> String {
        let mut out = String::new();
        for (state, action) in path {
            if let Some(action) = action {
                let _ = writeln!(out, "  {}", self.describe(state, action));
            }
        }
        if let Some((last, _)) = path.last() {
            let _ = writeln!(
                out,
                "  t={}: clients claiming a valid lock: {:?}; max fencing token {}{}",
                last.now,
                last.valid_holders(&self.config),
                last.max_fence,
                if last.fence_regressed {
                    " (one was not above an earlier one)"
                } else {
                    ""
                },
            );
        }
        out
    }
}

/// Whether holders in modes `a` and `b` may hold one resource at once: the distributed lock
/// manager's compatibility table, written out here rather than taken from the lock's
/// `Mode::compatible` (which also builds what the clients send), so that an error there
/// cannot hide itself.
fn may_share(a: &str, b: &str) -> bool {
    const TABLE: [(&str, &str); 6] = [
        ("NL", "NL CR CW PR PW EX"),
        ("CR", "NL CR CW PR PW"),
        ("CW", "NL CR CW"),
        ("PR", "NL CR PR"),
        ("PW", "NL CR"),
        ("EX", "NL"),
    ];
    TABLE
        .iter()
        .any(|(mode, with)| *mode == a && with.split(' ').any(|m| m == b))
}

/// Whether a delivery's reply is heard.
enum Kind {
    Deliver,
    LoseReply,
}

/// A script's name, for traces.
fn call_name(call: &Call) -> String {
    use crate::node::id;
    let name = match call.script {
        id::ACQUIRE => "ACQUIRE",
        id::ACQUIRE_QUEUED => "ACQUIRE_QUEUED",
        id::RELEASE => "RELEASE",
        id::RELEASE_HANDOVER => "RELEASE_HANDOVER",
        id::EXTEND => "EXTEND",
        id::FENCE => "FENCE",
        id::ACQUIRE_MODE => "ACQUIRE_MODE",
        id::RELEASE_MODE => "RELEASE_MODE",
        _ => "a script",
    };
    format!("{name}{:?}", call.args)
}

impl Model for System {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State {
            now: 0,
            nodes: (0..self.config.nodes)
                .map(|_| {
                    let mut node = Node::new(&run_id(0), 0).with_flaws(self.config.flaws);
                    keys::witnessed(&mut node, &self.config);
                    keys::foreign_hash(&mut node, &self.config);
                    NodeState {
                        node,
                        skew: 0,
                        incarnation: 0,
                    }
                })
                .collect(),
            clients: self
                .config
                .clients
                .iter()
                .map(|p| Client::new(*p))
                .collect(),
            net: Vec::new(),
            restarts: 0,
            data_losses: 0,
            lost_data: 0,
            max_fence: 0,
            fence_regressed: false,
            lost_by: 0,
            granted_after_loss: false,
        }]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let faults = &self.config.faults;
        for (i, msg) in state.net.iter().enumerate() {
            if !state.deliverable(i) {
                continue;
            }
            actions.push(Action::Deliver(msg.clone()));
            if faults.lose_messages && !self.config.fair {
                actions.push(Action::Lose(msg.clone()));
                if matches!(msg, Msg::Request { op: Some(_), .. }) {
                    actions.push(Action::LoseReply(msg.clone()));
                }
            }
        }
        for c in 0..state.clients.len() {
            if self.step_enabled(state, c) {
                if self.step_draws(state, c) {
                    actions.push(Action::Step { client: c, draw: 1 });
                    actions.push(Action::Step { client: c, draw: 2 });
                } else {
                    actions.push(Action::Step { client: c, draw: 0 });
                }
            }
        }
        if self.tick_enabled(state) {
            actions.push(Action::Tick);
        }
        if self.config.fair {
            return;
        }
        for n in 0..state.nodes.len() {
            if state.restarts < faults.restarts {
                actions.push(Action::Restart(n));
            }
            if state.data_losses < faults.data_losses {
                actions.push(Action::LoseData(n));
            }
            if state.nodes[n].skew < faults.clock_skew {
                actions.push(Action::Skew(n));
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut state = last.clone();
        let action_kind = if matches!(action, Action::LoseReply(_)) {
            Kind::LoseReply
        } else {
            Kind::Deliver
        };
        match action {
            Action::Deliver(msg) | Action::LoseReply(msg) => {
                let heard = matches!(action_kind, Kind::Deliver);
                if let (false, Msg::Request { client, .. }) = (heard, &msg) {
                    state.lost_by |= 1 << client;
                }
                state.remove(&msg);
                match msg {
                    Msg::Request {
                        client,
                        node,
                        op,
                        req,
                    } => {
                        self.deliver_request(&mut state, (client, node, op, req), heard);
                    }
                    Msg::Wake { client, text } => self.deliver_wake(&mut state, client, &text),
                }
            }
            Action::Lose(msg) => {
                state.remove(&msg);
                if let Msg::Request { client, .. } = msg {
                    state.lost_by |= 1 << client;
                }
            }
            Action::Tick => {
                state.now += 1;
                let now = state.now;
                for node in &mut state.nodes {
                    let skew = node.skew;
                    node.node.set_now(now + skew);
                }
            }
            Action::Step { client, draw } => {
                self.step(&mut state, client, draw);
                if !state.clients[client].listening() {
                    // Its listener is gone, with the messages it kept.
                    state
                        .net
                        .retain(|m| !matches!(m, Msg::Wake { client: c, .. } if *c == client));
                }
            }
            Action::Restart(n) => {
                state.restarts += 1;
                state.lost_data |= 1 << n;
                let node = &mut state.nodes[n];
                node.incarnation += 1;
                let id = run_id(node.incarnation);
                node.node.restart(&id);
            }
            Action::LoseData(n) => {
                state.data_losses += 1;
                state.lost_data |= 1 << n;
                state.nodes[n].node.lose_data();
            }
            Action::Skew(n) => {
                let now = state.now;
                let node = &mut state.nodes[n];
                node.skew += 1;
                let skew = node.skew;
                node.node.set_now(now + skew);
            }
        }
        Some(state)
    }

    fn format_step(&self, last: &State, action: Action) -> Option<String> {
        Some(self.describe(last, &action))
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no two valid holders", |model: &System, state: &State| {
                if !model.config.promises_exclusion {
                    return true;
                }
                let holders = state.valid_holders(&model.config);
                let mode = |c: usize| state.clients[c].program.mode.map_or("EX", Mode::as_str);
                holders.iter().enumerate().all(|(i, &a)| {
                    holders[i + 1..]
                        .iter()
                        .all(|&b| may_share(mode(a), mode(b)))
                })
            }),
            Property::always(
                "no key of a foreign client deleted or changed",
                |model: &System, state: &State| {
                    !model.config.foreign_hash
                        || state.nodes.iter().enumerate().all(|(n, node)| {
                            state.lost_data >> n & 1 == 1 || keys::foreign_hash_intact(&node.node)
                        })
                },
            ),
            Property::always(
                "fencing tokens increase while fewer than 2F - N nodes lost data",
                |model: &System, state: &State| {
                    // The promise is the lock's, at its fencing quorum (N / 2 + 2 for odd N,
                    // at most N), whatever quorum the clients use.
                    let n = model.config.nodes;
                    let bound = (2 * lock::fencing_quorum(n)).saturating_sub(n);
                    let lost = state.lost_data.count_ones() as usize;
                    !state.fence_regressed || lost >= bound
                },
            ),
            Property::always(
                "every locker holds the lock in time",
                |model: &System, state: &State| {
                    let lockers = state
                        .clients
                        .iter()
                        .filter(|c| !c.program.skip_if_busy && !c.program.may_give_up);
                    !model.live(state) || lockers.clone().all(|c| c.holds > 0)
                },
            ),
            Property::always(
                "a waiter whose acquisition is over has left every queue",
                |model: &System, state: &State| {
                    !model.live(state)
                        || state.clients.iter().enumerate().all(|(c, client)| {
                            let queued = |node: &NodeState| {
                                matches!(
                                    node.node.store.zscore(keys::QUEUE, &keys::marker(c)),
                                    Ok(Some(_))
                                )
                            };
                            // Once its calls have all landed (a leave may still be on
                            // its way when the run ends).
                            let in_flight = state.net.iter().any(
                                |m| matches!(m, Msg::Request { client: from, .. } if *from == c),
                            );
                            client.program.mode.is_some()
                                || client.listening()
                                || in_flight
                                || !state.nodes.iter().any(queued)
                        })
                },
            ),
            Property::always(
                "a skip-if-busy tick runs somewhere",
                |model: &System, state: &State| !model.live(state) || model.tick_ran(state),
            ),
            // Not a property of the lock: a witness that the liveness properties above were
            // evaluated, on some run that got to its end.
            Property::sometimes(RUN_ENDS, |model: &System, state: &State| model.live(state)),
            // Witnesses that a scenario reaches what it checks (a model that stops all
            // progress would pass every `always` above).
            Property::sometimes(witness::GRANTED, |_: &System, state: &State| {
                state.clients.iter().any(|c| c.holds > 0)
            }),
            Property::sometimes(witness::GAVE_UP_QUEUED, |_: &System, state: &State| {
                state.clients.iter().any(|c| c.gave_up_queued)
            }),
            Property::sometimes(witness::EXTENDED, |model: &System, state: &State| {
                let config = &model.config;
                state.clients.iter().any(|c| match &c.phase {
                    Phase::Holding(lease) => {
                        let granted =
                            lease.granted_at + config.ttl - Client::drift(config).min(config.ttl);
                        lease.extended && lease.valid_until > granted
                    }
                    _ => false,
                })
            }),
            Property::sometimes(witness::AFTER_LOSS, |_: &System, state: &State| {
                state.granted_after_loss
            }),
            Property::sometimes(witness::NAMED, |_: &System, state: &State| {
                state.net.iter().any(|m| match m {
                    Msg::Wake { client, text } => {
                        text.split(' ').next() == Some(keys::marker(*client).as_str())
                            && matches!(
                                state.clients[*client].phase,
                                Phase::AwaitingHandover { .. }
                            )
                    }
                    Msg::Request { .. } => false,
                })
            }),
            Property::sometimes(witness::REVOTED, |_: &System, state: &State| {
                state.nodes.iter().enumerate().any(|(n, node)| {
                    state.lost_data >> n & 1 == 1 && keys::holds_a_token(&node.node)
                })
            }),
        ]
    }

    fn within_boundary(&self, state: &State) -> bool {
        state.now <= self.config.horizon
    }
}

impl System {
    /// Whether a liveness property is due: the run is fair and over.
    fn live(&self, state: &State) -> bool {
        self.config.fair && state.over(&self.config)
    }

    /// Whether the skip-if-busy clients' tick ran on one of them (trivially, without such
    /// clients). Random delays after split votes make a tick that runs nowhere unlikely, not
    /// impossible: every contender may draw the same delays every time. So a run in which
    /// each skipper made every split retry, all drawing the same delays, is excused: the
    /// model's delays are adversarial, the lock's are random.
    pub fn tick_ran(&self, state: &State) -> bool {
        let skippers: Vec<&Client> = state
            .clients
            .iter()
            .filter(|c| c.program.skip_if_busy)
            .collect();
        let tied = skippers.iter().all(|c| {
            c.program.split_retries > 0 && c.draws.len() == usize::from(c.program.split_retries)
        }) && skippers.windows(2).all(|w| w[0].draws == w[1].draws);
        skippers.is_empty() || skippers.iter().any(|c| c.holds > 0) || tied
    }
}
