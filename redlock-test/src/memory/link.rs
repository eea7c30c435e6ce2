//! A handle's way to one in-memory node: the transport seam's two sides
//! ([`Transport`] for commands, [`Channels`] for the waiters' messages).

use redlock_core::transport::{
    Channels, Deliver, Key, NodeError, Pending, Reply, Transport, Value,
};

use std::sync::PoisonError;

use super::node::{self, Shared};

/// Commands to one in-memory node, run when first polled.
#[derive(Debug)]
pub(super) struct Link(pub(super) Shared);

impl Link {
    /// Runs `run` on the node at the first poll of the reply (the order in which replies are
    /// first polled is the order the node runs them), then answers no sooner than the next
    /// turn of the runtime, as over a connection, and once the node's delay has passed; a
    /// node that is down answers as a dropped connection would. Must be polled inside a
    /// tokio runtime.
    ///
    /// Never at the first poll: a round that found its quorum in the replies it polled first
    /// would drop the calls it has not polled yet, and a node answering at once would never
    /// see them, where a server is sent every call of the round before any reply comes.
    fn reply<F>(&self, run: F) -> Reply
    where
        F: FnOnce(&Shared) -> Option<Result<Value, NodeError>> + Send + 'static,
    {
        let node = self.0.clone();
        Box::pin(async move {
            let delay = node.state().delay;
            let answer = run(&node).unwrap_or(Err(NodeError::Disconnected));
            // The reply travels back on a task of its own, which wakes the caller: a future
            // polled once without a waker (a call made now and awaited later) is answered
            // when awaited, not during that first poll.
            let (reply, answered) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let _gone = reply.send(answer);
            });
            answered.await.unwrap_or(Err(NodeError::Disconnected))
        })
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
