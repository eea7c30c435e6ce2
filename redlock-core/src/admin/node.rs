//! What a node runs for a force-release: [`FORCE_READ`] and [`FORCE_RELEASE`] (declared and
//! submitted to the dispatch script here, beside their `.lua` files) and the commands that
//! send them.

use std::time::Duration;

use fred::types::Value;

use crate::keys::ResourceKeys;
use crate::node::scripts::{Effect, Script};
use crate::node::{Arg, Node};
use crate::outcome::{NodeError, NodeVote};

/// An operator's release of the holders a [`FORCE_READ`] named (`force_release.lua`).
static FORCE_RELEASE: Script = Script::new(17, Effect::Compares, include_str!("force_release.lua"));
inventory::submit!(&FORCE_RELEASE);

/// Who holds a resource on one node, as digests, read before a force-release
/// (`force_read.lua`).
static FORCE_READ: Script = Script::new(19, Effect::Neither, include_str!("force_read.lua"));
inventory::submit!(&FORCE_READ);

impl Node {
    /// Reads who holds `keys`' resource on one node ([`FORCE_READ`]), within `limit`: the
    /// holders' digests (SHA-1 of what signs each hold, never the token), empty when it holds
    /// none; `Ok(None)` when the key holds data that is not a lock.
    pub(super) async fn force_read(
        &self,
        keys: &ResourceKeys,
        limit: Duration,
    ) -> Result<Option<Vec<String>>, NodeError> {
        let answer = self.eval_release_within(&FORCE_READ, &[keys.lock.as_str()], &[], limit);
        match answer.await? {
            Value::Array(reply) => match reply.split_first() {
                Some((Value::Integer(1), digests)) => digests
                    .iter()
                    .map(|d| {
                        d.as_string().ok_or_else(|| {
                            NodeError::UnexpectedReply(format!(
                                "to the force-read script: {reply:?}"
                            ))
                        })
                    })
                    .collect::<Result<Vec<_>, _>>()
                    .map(Some),
                Some((Value::Integer(0), [])) => Ok(Some(Vec::new())),
                Some((Value::Integer(-2), [])) => Ok(None),
                _ => Err(NodeError::UnexpectedReply(format!(
                    "to the force-read script: {reply:?}"
                ))),
            },
            reply => Err(NodeError::UnexpectedReply(format!(
                "to the force-read script: {reply:?}"
            ))),
        }
    }

    /// Removes the holders named by `digests` (a [`force_read`](Self::force_read) of every
    /// node) from `keys`' resource on one node, whatever their token ([`FORCE_RELEASE`]),
    /// waking its waiters on `channel` (empty: nobody), run to completion within `limit`;
    /// made now, as [`resume`](Self::resume). A holder that took the key after the read has
    /// another digest and stays. [`NodeVote::Acquired`] if a holder was removed,
    /// [`NodeVote::Held`] if none of them was there, and `true` beside it when the key holds
    /// data that is not a lock (left as it was).
    pub(super) fn force_release(
        &self,
        keys: &ResourceKeys,
        digests: &[String],
        channel: &str,
        limit: Duration,
    ) -> impl Future<Output = (NodeVote, bool)> + Send + use<> {
        let mut args = Vec::with_capacity(1 + digests.len());
        args.push(Arg::from(channel));
        args.extend(digests.iter().map(|d| Arg::from(d.as_str())));
        let answer = self.eval_release_within(&FORCE_RELEASE, &[keys.lock.as_str()], &args, limit);
        async move {
            match answer.await {
                Ok(Value::Integer(1)) => (NodeVote::Acquired, false),
                Ok(Value::Integer(-2)) => (NodeVote::Held, true),
                Ok(Value::Integer(_)) => (NodeVote::Held, false),
                Ok(reply) => (
                    NodeVote::Failed(NodeError::UnexpectedReply(format!(
                        "to the force-release script: {reply:?}"
                    ))),
                    false,
                ),
                Err(e) => (NodeVote::Failed(e), false),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::scripts::mutated;

    #[test]
    fn the_effect_check_refuses_the_force_release_script_without_its_compare() {
        // Force-release compares digests.
        assert_eq!(FORCE_RELEASE.effect, Effect::Compares);
        // force_release.lua without the digest compare of its string branch: removed, or
        // commented out.
        let digest = "  if not named[redis.sha1hex(redis.call(\"get\", key))] then return 0 end\n";
        for to in [String::new(), format!("--{digest}")] {
            let broken = mutated(FORCE_RELEASE.source, digest, &to);
            let refused = FORCE_RELEASE.effect.check(&broken);
            assert!(
                refused
                    .as_ref()
                    .is_err_and(|e| e.contains(r#"`redis.call("del", key)`: a holder's entry"#)),
                "force_release.lua without its compare: {refused:?}"
            );
        }
        // The script as it is passes.
        assert_eq!(FORCE_RELEASE.effect.check(FORCE_RELEASE.source), Ok(()));
    }
}
