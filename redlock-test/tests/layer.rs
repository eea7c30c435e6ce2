//! The in-memory node's own layer against a real server: what the lock sends (its `SET NX PX
//! GET`, batches of several script calls in the dispatch script's layout, a wrong SHA-1, a
//! bad ttl) sent to both, the replies compared. The scripts themselves are compared call by
//! call with the real ones by the workspace's differential test (`tests/tests/model_scripts.rs`);
//! this covers what sits around them.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use redlock_core::transport::{NodeError, dispatch_sha1};
use redlock_model::node::id;
use redlock_test::{MemoryNodes, TestServer, plain_client};

const A: &str = "0123456789abcdef0123456789abcdef01234567";
const B: &str = "a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0a0";

/// What a server or an in-memory node answered, as compared.
type Shown = Result<Value, String>;

/// A reply as both sides are compared: a value, or an error's code (its first word).
fn shown(reply: Result<Value, NodeError>) -> Shown {
    reply.map_err(|error| match error {
        NodeError::Reply(error) => error.details().split(' ').next().unwrap_or("").to_owned(),
        other => format!("{other:?}"),
    })
}

/// `(command, args)`: a batch of `calls` (script id, keys, args) in the dispatch layout.
fn batch(calls: &[(usize, &[&str], &[&str])]) -> (&'static str, Vec<Value>) {
    let keys: Vec<&str> = calls.iter().flat_map(|c| c.1.iter().copied()).collect();
    let mut args = vec![Value::from(dispatch_sha1()), Value::from(keys.len() as i64)];
    args.extend(keys.iter().map(|k| Value::from(*k)));
    args.push(Value::from(calls.len() as i64));
    for (script, keys, argv) in calls {
        let head = redlock_core::__private::batch_head(*script, keys.len(), argv.len());
        args.push(Value::Integer(head.unwrap()));
    }
    args.extend(
        calls
            .iter()
            .flat_map(|c| c.2.iter().map(|a| Value::from(*a))),
    );
    ("EVALSHA", args)
}

#[tokio::test]
async fn what_surrounds_the_scripts_answers_as_a_server_does() {
    let server = TestServer::start();
    let client = plain_client(&server.url()).await;
    let nodes = MemoryNodes::new(1);
    let memory = nodes.transport(0);
    let source = redlock_core::__private::sent_scripts()[0].source;

    let send = async |command: &'static str, args: Vec<Value>| {
        let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
        let real = client.custom::<Value, Value>(cmd, args.clone()).await;
        let real = shown(real.map_err(|e| NodeError::error_reply(e.details().to_owned())));
        let ours = shown(memory.send(command, args).await);
        (real, ours)
    };
    let set_nx = async |key: &str, token: &str, ttl_ms: i64| {
        let args = vec![
            Value::from(key),
            Value::from(token),
            Value::from("NX"),
            Value::from("PX"),
            Value::Integer(ttl_ms),
            Value::from("GET"),
        ];
        let cmd = CustomCommand::new_static("SET", ClusterHash::FirstKey, false);
        let real = client.custom::<Value, Value>(cmd, args).await;
        let real = shown(real.map_err(|e| NodeError::error_reply(e.details().to_owned())));
        let ours = shown(memory.set_nx(key.into(), token.into(), ttl_ms).await);
        (real, ours)
    };

    // Before the script is loaded, its SHA-1 is unknown to both.
    let (real, ours) = send(
        batch(&[(id::NOOP, &[], &[])]).0,
        batch(&[(id::NOOP, &[], &[])]).1,
    )
    .await;
    assert_eq!(
        (real, ours.clone()),
        (Err("NOSCRIPT".into()), Err("NOSCRIPT".into()))
    );
    let load = vec![Value::from("LOAD"), Value::from(source)];
    let (real, ours) = send("SCRIPT", load).await;
    assert_eq!(real, ours);

    let steps: Vec<(&str, (Shown, Shown))> = vec![
        ("a free key is set", set_nx("k", A, 10_000).await),
        (
            "a held key answers its holder",
            set_nx("k", B, 10_000).await,
        ),
        ("a bad ttl is refused", set_nx("j", A, 0).await),
        (
            "a batch of several calls, each with its own keys and arguments",
            {
                let (command, args) = batch(&[
                    (id::RELEASE, &["k"], &[B]),
                    (id::EXTEND, &["k"], &[A, "20000"]),
                    (id::RELEASE, &["k2"], &[A]),
                    (id::RELEASE, &["k", "k2"], &[A]),
                ]);
                send(command, args).await
            },
        ),
        (
            "a string's SET on the key a batch extended",
            set_nx("k", B, 5_000).await,
        ),
        ("a batch that releases the key, then one alone", {
            let (command, args) = batch(&[(id::RELEASE, &["k"], &[A]), (id::NOOP, &[], &[])]);
            send(command, args).await
        }),
        ("a released key is free again", set_nx("k", B, 5_000).await),
        (
            "a wrong SHA-1",
            send("EVALSHA", vec!["0".repeat(40).into(), 0.into()]).await,
        ),
    ];
    for (what, (real, ours)) in steps {
        assert_eq!(real, ours, "{what}");
    }
    client.quit().await.unwrap();
}
