//! A handle's way to one in-memory node: the transport seam's two sides
//! ([`Transport`] for commands, [`Channels`] for the waiters' messages).

use redlock_core::transport::{
    Channels, Deliver, Key, NodeError, Pending, Reply, Transport, Value,
};

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

use super::node::{self, Shared};

/// Commands to one in-memory node over one connection, in order.
#[derive(Debug)]
pub(super) struct Link {
    node: Shared,
    wire: Arc<Wire>,
}

/// One connection's order: commands reach the node, and their replies come back, in the
/// order they were sent, however late each is made (as over TCP). Each is a line of
/// [`Turn`]s, each waiting for the one before it alone, so that a run wakes them in the same
/// order every time (a simulation's seed replays).
#[derive(Debug, Default)]
struct Wire {
    /// The last command sent: the next one reaches the node after it.
    arrived: Mutex<Option<oneshot::Receiver<()>>>,
    /// The last reply to come: the next one comes back after it.
    returned: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Wire {
    /// The next place in `line`.
    fn line_up(line: &Mutex<Option<oneshot::Receiver<()>>>) -> Turn {
        let (done, next) = oneshot::channel();
        let before = line
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .replace(next);
        Turn { before, done }
    }
}

/// One place in a line: it goes once the place before it has gone (or was dropped).
#[derive(Debug)]
struct Turn {
    before: Option<oneshot::Receiver<()>>,
    done: oneshot::Sender<()>,
}

impl Turn {
    /// Whether the place before has gone.
    fn is_next(&mut self) -> bool {
        self.before.as_mut().is_none_or(|before| {
            !matches!(before.try_recv(), Err(oneshot::error::TryRecvError::Empty))
        })
    }

    /// Waits for the place before to go.
    async fn wait(&mut self) {
        if let Some(before) = self.before.take() {
            let _gone = before.await;
        }
    }

    /// Goes, letting the next place go.
    fn pass(self) {
        let _gone = self.done.send(());
    }
}

impl Link {
    pub(super) fn new(node: Shared) -> Self {
        Self {
            node,
            wire: Arc::default(),
        }
    }

    /// Runs `run` on the node at the first poll of the reply (the order in which replies are
    /// first polled is the order the node runs them), then answers no sooner than the next
    /// turn of the runtime, as over a connection, and once the node's delay has passed; a
    /// node that is down answers as a dropped connection would. Must be polled inside a
    /// tokio runtime.
    ///
    /// Never at the first poll: a round that found its quorum in the replies it polled first
    /// would drop the calls it has not polled yet, and a node answering at once would never
    /// see them, where a server is sent every call of the round before any reply comes.
    ///
    /// With the node's faults ([`MemoryNodes::delay_requests`](super::MemoryNodes::delay_requests),
    /// [`MemoryNodes::lose_requests`](super::MemoryNodes::lose_requests),
    /// [`MemoryNodes::lose_replies`](super::MemoryNodes::lose_replies)), the command runs
    /// later, on a task of its own (it reaches the node whether or not its caller still
    /// waits), or never; a lost request or reply leaves the caller waiting, which its own
    /// timeout ends. Commands and replies keep the order they were sent in.
    fn reply<F>(&self, run: F) -> Reply
    where
        F: FnOnce(&Shared) -> Option<Result<Value, NodeError>> + Send + 'static,
    {
        let node = self.node.clone();
        let wire = Arc::clone(&self.wire);
        Box::pin(async move {
            let mut arrive = Wire::line_up(&wire.arrived);
            let back = Wire::line_up(&wire.returned);
            let (request_delay, lost_request) = node.request_faults();
            let (reply, answered) = oneshot::channel();
            if request_delay.is_zero() && !lost_request && arrive.is_next() {
                // Nothing before it on the wire: it reaches the node now.
                let answer = run(&node).unwrap_or(Err(NodeError::Disconnected));
                arrive.pass();
                tokio::spawn(carry(node, back, reply, answer));
            } else {
                tokio::spawn(async move {
                    if !request_delay.is_zero() {
                        tokio::time::sleep(request_delay).await;
                    }
                    arrive.wait().await;
                    arrive.pass();
                    if lost_request {
                        // Nothing reaches the node, and nothing comes back (`back` goes).
                        return;
                    }
                    let answer = run(&node).unwrap_or(Err(NodeError::Disconnected));
                    carry(node, back, reply, answer).await;
                });
            }
            match answered.await {
                Ok(answer) => answer,
                // Lost on the way: the caller's own timeout ends its wait.
                Err(_lost) => std::future::pending().await,
            }
        })
    }
}

/// Carries `answer` back to its caller on a task of its own, which wakes the caller (a future
/// polled once without a waker, a call made now and awaited later, is answered when awaited,
/// not during that first poll), once the node's reply delay has passed and the replies sent
/// before it are back; or loses it.
async fn carry(
    node: Shared,
    mut back: Turn,
    reply: oneshot::Sender<Result<Value, NodeError>>,
    answer: Result<Value, NodeError>,
) {
    let (delay, lost_reply) = node.reply_faults();
    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }
    back.wait().await;
    back.pass();
    if !lost_reply {
        let _gone = reply.send(answer);
    }
}

impl Transport for Link {
    fn send(&self, command: &'static str, args: Vec<Value>) -> Reply {
        self.reply(move |node| node.run(command, &args))
    }

    fn set_nx(&self, key: Key, token: Value, ttl_ms: i64) -> Reply {
        self.reply(move |node| {
            let key = key.as_str().unwrap_or_default().to_owned();
            let token = token.as_string().unwrap_or_default();
            node.set_nx(&key, &token, ttl_ms)
        })
    }
}

/// One handle's subscriptions on one in-memory node.
#[derive(Debug)]
pub(super) struct Subscriptions {
    node: Shared,
    channels: node::Channels,
}

impl Subscriptions {
    pub(super) fn new(node: Shared) -> Self {
        Self {
            node,
            channels: node::Channels::default(),
        }
    }

    /// Subscribes to `channel` (`on`) or unsubscribes; refused while the node is down.
    fn change(&self, channel: &str, on: bool) -> Pending {
        let up = self.node.is_up();
        if up {
            let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
            if on {
                channels.insert(channel.to_owned());
            } else {
                channels.remove(channel);
            }
        }
        Box::pin(std::future::ready(if up {
            Ok(())
        } else {
            Err(NodeError::Disconnected)
        }))
    }
}

impl Channels for Subscriptions {
    fn subscribe(&self, channel: &str) -> Pending {
        self.change(channel, true)
    }

    fn unsubscribe(&self, channel: &str) -> Pending {
        self.change(channel, false)
    }

    fn deliver_to(&self, deliver: Deliver) {
        self.node.listen(self.channels.clone(), deliver);
    }

    fn connected(&self) -> Pending {
        Box::pin(std::future::ready(Ok(())))
    }

    fn quit(&self) -> Pending {
        Box::pin(std::future::ready(Ok(())))
    }
}
