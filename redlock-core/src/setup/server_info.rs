//! What `build` reads from each node's `INFO` (one round per node), and the checks that
//! refuse nodes which are not independent masters: cluster mode, replicas, one replication
//! group given twice, the same server given twice, and an eviction policy that can evict a
//! lock key.

use crate::error::BuildError;

/// The `INFO` sections asked for, in one command (Redis 7 and Valkey accept several; older
/// servers answer an error, and the default `INFO` holds them all).
pub(crate) const SECTIONS: [&str; 4] = ["server", "replication", "memory", "cluster"];

/// The fields of one node's `INFO` that the checks use; absent fields are `None` (an older
/// server, or a section it does not have), and skip their check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerInfo {
    /// `run_id`: one per server process.
    pub(crate) run_id: Option<String>,
    /// `role` is `slave` (or `replica`).
    pub(crate) replica: bool,
    /// `master_host:master_port` of a replica.
    pub(crate) master: Option<String>,
    /// `master_replid` and `master_replid2`, without the all-zero "none".
    pub(crate) replids: Vec<String>,
    /// `cluster_enabled:1`.
    pub(crate) cluster_enabled: bool,
    /// `maxmemory`, in bytes (0: no limit).
    pub(crate) maxmemory: Option<u64>,
    /// `maxmemory_policy`.
    pub(crate) maxmemory_policy: Option<String>,
}

impl ServerInfo {
    /// Parses the text of an `INFO` reply (`field:value` lines, `#` section headers).
    pub(crate) fn parse(text: &str) -> Self {
        let mut info = Self::default();
        let mut master_host = None;
        let mut master_port = None;
        for line in text.lines() {
            let Some((field, value)) = line.trim().split_once(':') else {
                continue;
            };
            let value = value.trim();
            match field {
                "run_id" => info.run_id = Some(value.to_owned()),
                "role" => info.replica = matches!(value, "slave" | "replica"),
                "master_host" => master_host = Some(value),
                "master_port" => master_port = Some(value),
                "master_replid" | "master_replid2"
                    if !value.is_empty() && !value.bytes().all(|b| b == b'0') =>
                {
                    info.replids.push(value.to_owned());
                }
                "cluster_enabled" => info.cluster_enabled = value == "1",
                "maxmemory" => info.maxmemory = value.parse().ok(),
                "maxmemory_policy" => info.maxmemory_policy = Some(value.to_owned()),
                _ => {}
            }
        }
        info.master = master_host.map(|host| match master_port {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        });
        info
    }

    /// The policy, if it can evict a lock key: any policy but `noeviction` once `maxmemory`
    /// is set (`allkeys-*` evicts any key, `volatile-*` keys with a ttl, as every lock key is).
    fn evicting_policy(&self) -> Option<(&str, u64)> {
        let maxmemory = self.maxmemory.filter(|&bytes| bytes > 0)?;
        let policy = self.maxmemory_policy.as_deref()?;
        (policy != "noeviction").then_some((policy, maxmemory))
    }

    /// A replication id the two nodes share, if any: the current one (a master and its
    /// replicas) or the previous one (a replica promoted from the other's group, or a server
    /// started from its data).
    fn shared_replid<'a>(&'a self, other: &Self) -> Option<&'a str> {
        self.replids
            .iter()
            .find(|id| other.replids.contains(id))
            .map(String::as_str)
    }
}

/// Refuses the first node, in order, that is not an independent master: cluster mode, a
/// replica, an evicting `maxmemory-policy`; then the first that is the same server as an
/// earlier one (`run_id`) or in one replication group with it (`master_replid`). `nodes`
/// holds the label and `INFO` of each node that answered.
pub(crate) fn check(nodes: &[(&str, ServerInfo)]) -> Result<(), BuildError> {
    for (label, info) in nodes {
        let node = (*label).to_owned();
        if info.cluster_enabled {
            return Err(BuildError::ClusterEnabled { node });
        }
        if info.replica {
            return Err(BuildError::Replica {
                node,
                master: info.master.clone(),
            });
        }
        if let Some((policy, maxmemory)) = info.evicting_policy() {
            return Err(BuildError::EvictionPolicy {
                node,
                policy: policy.to_owned(),
                maxmemory,
            });
        }
    }
    for (i, (label, info)) in nodes.iter().enumerate() {
        for (other_label, other) in &nodes[..i] {
            if info.run_id.is_some() && info.run_id == other.run_id {
                return Err(BuildError::DuplicateNode {
                    node: (*label).to_owned(),
                });
            }
            if let Some(replid) = info.shared_replid(other) {
                return Err(BuildError::SameReplicationGroup {
                    node: (*label).to_owned(),
                    other: (*other_label).to_owned(),
                    replid: replid.to_owned(),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: &str = "0000000000000000000000000000000000000000";

    /// An `INFO server replication memory cluster` reply as Redis 7 writes it.
    fn info(run_id: &str, replication: &str, memory: &str, cluster: u8) -> String {
        format!(
            "# Server\r\nredis_version:7.0.15\r\nrun_id:{run_id}\r\nuptime_in_seconds:9\r\n\r\n\
             # Replication\r\n{replication}\r\n\r\n\
             # Memory\r\nused_memory:1000\r\n{memory}\r\n\r\n\
             # Cluster\r\ncluster_enabled:{cluster}\r\n"
        )
    }

    fn master(run_id: &str, replid: &str, replid2: &str) -> ServerInfo {
        ServerInfo::parse(&info(
            run_id,
            &format!(
                "role:master\r\nconnected_slaves:0\r\nmaster_replid:{replid}\r\nmaster_replid2:{replid2}"
            ),
            "maxmemory:0\r\nmaxmemory_human:0B\r\nmaxmemory_policy:noeviction",
            0,
        ))
    }

    fn memory(maxmemory: u64, policy: &str) -> ServerInfo {
        ServerInfo::parse(&info(
            "a",
            &format!("role:master\r\nmaster_replid:1a\r\nmaster_replid2:{NONE}"),
            &format!("maxmemory:{maxmemory}\r\nmaxmemory_policy:{policy}"),
            0,
        ))
    }

    #[test]
    fn parses_the_fields_of_each_section() {
        let replica = ServerInfo::parse(&info(
            "r1",
            &format!(
                "role:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6380\r\nmaster_link_status:up\r\nmaster_replid:ab12\r\nmaster_replid2:{NONE}"
            ),
            "maxmemory:104857600\r\nmaxmemory_human:100.00M\r\nmaxmemory_policy:allkeys-lru",
            1,
        ));
        assert_eq!(
            replica,
            ServerInfo {
                run_id: Some("r1".into()),
                replica: true,
                master: Some("10.0.0.1:6380".into()),
                replids: vec!["ab12".into()],
                cluster_enabled: true,
                maxmemory: Some(104_857_600),
                maxmemory_policy: Some("allkeys-lru".into()),
            }
        );
        assert_eq!(ServerInfo::parse(""), ServerInfo::default());
    }

    #[test]
    fn independent_masters_pass() {
        let nodes = [
            ("a:1", master("r1", "aa", NONE)),
            ("b:1", master("r2", "bb", NONE)),
            ("c:1", master("r3", "cc", "dd")),
        ];
        check(&nodes).unwrap();
        check(&[]).unwrap();
    }

    #[test]
    fn cluster_mode_and_replicas_are_refused_by_name() {
        let mut clustered = master("r2", "bb", NONE);
        clustered.cluster_enabled = true;
        let error = check(&[("a:1", master("r1", "aa", NONE)), ("b:1", clustered)]).unwrap_err();
        assert!(
            matches!(&error, BuildError::ClusterEnabled { node } if node == "b:1"),
            "{error}"
        );

        let replica = ServerInfo {
            replica: true,
            master: Some("a:1".into()),
            ..master("r2", "aa", NONE)
        };
        let error = check(&[("a:1", master("r1", "aa", NONE)), ("b:1", replica)]).unwrap_err();
        assert!(
            matches!(&error, BuildError::Replica { node, master } if node == "b:1" && master.as_deref() == Some("a:1")),
            "{error}"
        );
        assert!(error.to_string().contains("replica of a:1"), "{error}");
    }

    #[test]
    fn a_shared_replication_id_is_one_group() {
        // Current ids equal: a master and a replica reported as master (or two replicas).
        let error = check(&[
            ("a:1", master("r1", "aa", NONE)),
            ("b:1", master("r2", "bb", NONE)),
            ("c:1", master("r3", "aa", NONE)),
        ])
        .unwrap_err();
        assert!(
            matches!(&error, BuildError::SameReplicationGroup { node, other, replid }
                if node == "c:1" && other == "a:1" && replid == "aa"),
            "{error}"
        );
        // A replica of `a` promoted: its previous id is `a`'s current one (either order).
        for nodes in [
            [
                ("a:1", master("r1", "aa", NONE)),
                ("b:1", master("r2", "bb", "aa")),
            ],
            [
                ("b:1", master("r2", "bb", "aa")),
                ("a:1", master("r1", "aa", NONE)),
            ],
        ] {
            assert!(matches!(
                check(&nodes),
                Err(BuildError::SameReplicationGroup { .. })
            ));
        }
        // Two forks of one master (both promoted, or both started from its data).
        assert!(matches!(
            check(&[
                ("a:1", master("r1", "aa", "zz")),
                ("b:1", master("r2", "bb", "zz"))
            ]),
            Err(BuildError::SameReplicationGroup { .. })
        ));
        // The all-zero "no previous id" is shared by everyone and means nothing.
        check(&[
            ("a:1", master("r1", "aa", NONE)),
            ("b:1", master("r2", "bb", NONE)),
        ])
        .unwrap();
    }

    #[test]
    fn the_same_run_id_is_one_server() {
        let error = check(&[
            ("127.0.0.1:1", master("r1", "aa", NONE)),
            ("localhost:1", master("r1", "aa", NONE)),
        ])
        .unwrap_err();
        assert!(
            matches!(&error, BuildError::DuplicateNode { node } if node == "localhost:1"),
            "{error}"
        );
    }

    #[test]
    fn only_noeviction_or_no_maxmemory_keeps_lock_keys() {
        for policy in [
            "allkeys-lru",
            "allkeys-lfu",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            let error = check(&[("a:1", memory(1 << 20, policy))]).unwrap_err();
            assert!(
                matches!(&error, BuildError::EvictionPolicy { node, policy: p, maxmemory: 1_048_576 }
                    if node == "a:1" && p == policy),
                "{error}"
            );
            assert!(
                error.to_string().contains("maxmemory-policy noeviction"),
                "{error}"
            );
            check(&[("a:1", memory(0, policy))]).unwrap();
        }
        check(&[("a:1", memory(1 << 20, "noeviction"))]).unwrap();
    }
}
