//! Symmetry of the nodes: two states that differ only in which node is which behave alike,
//! so the checker keeps one of them (up to N! fewer states). The representative orders the
//! nodes by a digest of everything that belongs to each: its keyspace and clock, the requests
//! in flight to it, the clients' votes from it, and whether it lost data.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use super::client::{Lease, Phase, Vote};
use super::system::{Msg, State};

/// The representative of `state`'s class: its nodes in a canonical order.
pub fn representative(state: &State) -> State {
    let n = state.nodes.len();
    let digest = |node: usize| {
        let mut h = DefaultHasher::new();
        state.nodes[node].hash(&mut h);
        for msg in &state.net {
            if let Msg::Request {
                node: to,
                client,
                op,
                req,
            } = msg
                && *to == node
            {
                (client, op, req).hash(&mut h);
            }
        }
        for client in &state.clients {
            votes(&client.phase).map(|v| &v[node]).hash(&mut h);
        }
        (state.lost_data >> node & 1).hash(&mut h);
        h.finish()
    };
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_cached_key(|&node| digest(node));
    // `order[new] = old`; `place[old] = new`.
    let mut place = vec![0; n];
    for (new, &old) in order.iter().enumerate() {
        place[old] = new;
    }
    let mut out = state.clone();
    out.nodes = order.iter().map(|&old| state.nodes[old].clone()).collect();
    for msg in &mut out.net {
        if let Msg::Request { node, .. } = msg {
            *node = place[*node];
        }
    }
    out.net.sort_by_key(|m| match m {
        Msg::Request { client, node, .. } => (0, *client, *node),
        Msg::Wake { client, .. } => (1, *client, 0),
    });
    // Keep each connection's order: the sort above is stable.
    for client in &mut out.clients {
        if let Some(v) = votes_mut(&mut client.phase) {
            let old = v.clone();
            for (new, &from) in order.iter().enumerate() {
                v[new] = old[from].clone();
            }
        }
    }
    out.lost_data = 0;
    for (new, &old) in order.iter().enumerate() {
        out.lost_data |= (state.lost_data >> old & 1) << new;
    }
    out
}

fn votes(phase: &Phase) -> Option<&Vec<Vote>> {
    match phase {
        Phase::Acquiring { votes, .. } | Phase::Fencing { votes, .. } => Some(votes),
        Phase::Holding(Lease {
            extending: Some((_, votes)),
            ..
        }) => Some(votes),
        _ => None,
    }
}

fn votes_mut(phase: &mut Phase) -> Option<&mut Vec<Vote>> {
    match phase {
        Phase::Acquiring { votes, .. } | Phase::Fencing { votes, .. } => Some(votes),
        Phase::Holding(Lease {
            extending: Some((_, votes)),
            ..
        }) => Some(votes),
        _ => None,
    }
}
