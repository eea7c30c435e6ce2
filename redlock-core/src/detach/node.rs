//! What a node runs for a resumption: [`RESUME`] (declared and submitted to the dispatch
//! script here, beside `resume.lua`) and the command that sends it.

use std::time::Duration;

use fred::types::Value;

use crate::kernel::commands::QuarantineCheck;
use crate::node::scripts::{Effect, Script};
use crate::node::{Arg, Node, int_arg};
use crate::outcome::{NodeError, NodeVote};

/// A detached lock's token swapped for its resumed holder's (`resume.lua`).
static RESUME: Script = Script::new(15, Effect::Swaps, include_str!("resume.lua"));
inventory::submit!(&RESUME);

impl Node {
    /// Swaps `token` for `next` on one node's lock key (or entry, for a lock in a `mode`),
    /// keeping its expiry ([`RESUME`]), run to completion within `limit`:
    /// [`NodeVote::Acquired`] with the time the key has left there (`None`: no expiry) if the
    /// node held `token` and now holds `next`, [`NodeVote::Held`] if it did not hold `token`,
    /// the key then keeping at most `cap_ms` (0: its expiry as it is);
    /// [`NodeError::Quarantined`] (or [`NodeError::QuarantineMismatch`]) from the quarantine
    /// check that opens the script, as every grant's. The call is made now, before the future
    /// is polled, so that a round decided at quorum still swaps the token on every node.
    pub(super) fn resume(
        &self,
        key: &str,
        (token, next): (&str, &str),
        (mode, cap_ms): (bool, u64),
        quarantine: &QuarantineCheck,
        limit: Duration,
    ) -> impl Future<Output = (NodeVote, Option<Duration>)> + Send + use<> {
        let (witness, marker) = quarantine.keys_or(key);
        let args = [
            Arg::from(token),
            Arg::from(next),
            Arg::from(if mode { "1" } else { "0" }),
            int_arg(quarantine.ms),
            int_arg(cap_ms),
        ];
        let answer = self.eval_release_within(&RESUME, &[key, witness, marker], &args, limit);
        async move {
            let unexpected = |reply: &dyn std::fmt::Debug| {
                NodeVote::Failed(NodeError::UnexpectedReply(format!(
                    "to the resume script: {reply:?}"
                )))
            };
            match answer.await {
                Ok(Value::Array(reply)) => match reply.as_slice() {
                    [Value::Integer(1), Value::Integer(left)] => (
                        NodeVote::Acquired,
                        u64::try_from(*left).ok().map(Duration::from_millis),
                    ),
                    [Value::Integer(-1), _] => (NodeVote::Failed(NodeError::Quarantined), None),
                    [Value::Integer(-3), _] => {
                        (NodeVote::Failed(NodeError::QuarantineMismatch), None)
                    }
                    [Value::Integer(0), _] => (NodeVote::Held, None),
                    _ => (unexpected(&reply), None),
                },
                Ok(reply) => (unexpected(&reply), None),
                Err(e) => (NodeVote::Failed(e), None),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::scripts::mutated;

    #[test]
    fn the_effect_check_refuses_the_resume_script_without_its_compare() {
        // Resumption is a grant and a compare.
        assert_eq!(RESUME.effect, Effect::Swaps);
        // resume.lua without the token compare of its plain branch.
        let compare = "  if redis.pcall(\"get\", key) ~= token then return {0, 0} end\n";
        let broken = mutated(RESUME.source, compare, "");
        let refused = RESUME.effect.check(&broken);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains(r#"`redis.call("set", key, next, "KEEPTTL")`"#)),
            "resume.lua without its plain branch's compare: {refused:?}"
        );
        // The script as it is passes.
        assert_eq!(RESUME.effect.check(RESUME.source), Ok(()));
    }
}
