//! The Lua scripts as a real server sees them: every script the lock sends loads
//! (`SCRIPT LOAD` compiles it), the SHA-1 the server returns is the one the code sends with
//! `EVALSHA`, each runs, and every `.lua` file under `redlock-core/src/` is part
//! of a script the lock sends (no file left over).

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::path::Path;

use fred::clients::Client;
use fred::interfaces::ClientLike;
use fred::types::{ClusterHash, CustomCommand, Value};
use redlock_core::__private::sent_scripts;
use redlock_tests::{RedisServer, plain_client, within};

/// `command args...` on `client`.
async fn run(client: &Client, command: &'static str, args: Vec<Value>) -> Value {
    let cmd = CustomCommand::new_static(command, ClusterHash::FirstKey, false);
    within(command, client.custom::<Value, Value>(cmd, args))
        .await
        .unwrap_or_else(|e| panic!("{command}: {e}"))
}

#[tokio::test]
async fn every_script_loads_under_the_sha_the_code_sends() {
    let server = RedisServer::start();
    let client = plain_client(&server.url()).await;
    for script in sent_scripts() {
        let loaded = run(&client, "SCRIPT", vec!["LOAD".into(), script.source.into()]).await;
        let loaded = loaded.as_string().unwrap();
        assert_eq!(
            loaded,
            fred::util::sha1_hash(script.source),
            "the server's SHA-1 of the {} script",
            script.name
        );
        if let Some(sha1) = script.sha1 {
            assert_eq!(
                loaded, sha1,
                "the {} script is sent by another SHA-1 than its text's",
                script.name
            );
        }
    }

    // Each runs: the dispatch script with one call to the barrier (NOOP, id 11, no keys, no
    // arguments), by the SHA-1 the code sends; the inspect script on a free resource.
    let [dispatch, inspect] = sent_scripts();
    let sha1 = dispatch.sha1.unwrap();
    let head = redlock_core::__private::batch_head(11, 0, 0).unwrap();
    let args: Vec<Value> = vec![sha1.into(), 0.into(), 1.into(), head.into()];
    let replies = run(&client, "EVALSHA", args).await;
    assert_eq!(replies, Value::Array(vec![Value::Integer(1)]));
    // The barrier alone (`ARGV` opening with `=<id>`): its reply as it is.
    let args: Vec<Value> = vec![sha1.into(), 0.into(), "=11".into()];
    assert_eq!(run(&client, "EVALSHA", args).await, Value::Integer(1));
    let args: Vec<Value> = vec![
        inspect.source.into(),
        2.into(),
        "scripts:free".into(),
        "scripts:free:waiters".into(),
    ];
    let status = run(&client, "EVAL", args).await;
    let expected: Vec<Value> = vec!["none".into(), (-2).into(), 0.into(), 0.into(), "".into()];
    assert_eq!(status, Value::Array(expected));
}

/// Every `.lua` file is sent whole, in the dispatch script or the inspect script: none is left
/// over. Each opens with its own header (a first line no other file has, so that a copy of a
/// file under another name is not taken for the file it copies), and a script's header says
/// its Redlock step, its `KEYS` and `ARGV` and what it returns.
#[test]
fn every_lua_file_is_sent() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../redlock-core/src");
    let sent = sent_scripts();
    let mut first_lines = Vec::new();
    for path in lua_files(&dir) {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            sent.iter().any(|script| script.source.contains(&text)),
            "{name} is in no script the lock sends"
        );
        let header: Vec<&str> = text.lines().take_while(|l| l.starts_with("--")).collect();
        assert!(!header.is_empty(), "{name} opens with no header comment");
        if name != "prelude.lua" {
            let header = header.join("\n");
            for part in ["Redlock step", "KEYS:", "ARGV:", "Returns"] {
                assert!(header.contains(part), "{name}'s header says no {part:?}");
            }
        }
        first_lines.push((text.lines().next().unwrap_or_default().to_owned(), name));
    }
    assert!(!first_lines.is_empty(), "no .lua file in {}", dir.display());
    first_lines.sort();
    for pair in first_lines.windows(2) {
        assert_ne!(
            pair[0].0, pair[1].0,
            "{} and {} open alike",
            pair[0].1, pair[1].1
        );
    }
}

/// The handle runs its scripts by the SHA-1 the server knows them by: a lock and its release
/// on a fresh server (counted from after `build()`, whose node-set check is an `EVAL` of its
/// own) leave the dispatch script in the server's cache under the SHA-1 the code sends, and
/// need no `EVAL` (a wrong SHA-1 would be answered `NOSCRIPT` and
/// every call sent again by its source, which works, but at twice the cost).
#[tokio::test]
async fn the_handle_runs_its_scripts_by_their_sha() {
    let server = RedisServer::start();
    let redlock = redlock_core::Redlock::builder()
        .node(server.url())
        .build()
        .await
        .unwrap();
    let client = plain_client(&server.url()).await;
    run(&client, "CONFIG", vec!["RESETSTAT".into()]).await;
    let guard = redlock.lock("scripts:sha").await.unwrap();
    guard.release().await.unwrap();
    let [dispatch, _] = sent_scripts();
    let sha1 = dispatch.sha1.unwrap();
    let exists = run(&client, "SCRIPT", vec!["EXISTS".into(), sha1.into()]).await;
    assert_eq!(exists, Value::Array(vec![Value::Integer(1)]));
    let stats = run(&client, "INFO", vec!["commandstats".into()]).await;
    let stats = stats.as_string().unwrap();
    assert!(stats.contains("cmdstat_evalsha:"), "{stats}");
    assert!(
        !stats.contains("cmdstat_eval:"),
        "an EVAL was needed: {stats}"
    );
}

/// The lock of several resources is all or none on one node, seen at the script itself (a
/// failed attempt's clean-up cannot hide a partial write here): with one key of the set
/// present, the attempt is refused, names the busy key by its place (`2:<holder>`, which
/// tells a split key by key), and writes none of the others; with none, it writes all. Its
/// extension is all or none too: with one key gone, no key of the set is extended.
#[tokio::test]
async fn a_set_is_taken_all_or_none_on_one_node() {
    let server = RedisServer::start();
    let client = plain_client(&server.url()).await;
    let [dispatch, _] = sent_scripts();
    let sha1 = dispatch.sha1.unwrap();
    run(
        &client,
        "SCRIPT",
        vec!["LOAD".into(), dispatch.source.into()],
    )
    .await;
    // ACQUIRE is script 3: KEYS the lock keys, their windows, the first's streak, witness,
    // marker; ARGV token, ttl_ms, quarantine_ms, windowed, n.
    let attempt = |token: &'static str| -> Vec<Value> {
        let keys = ["many:a", "many:b", "many:c"];
        let windows = ["many:a:w", "many:b:w", "many:c:w"];
        let rest = ["many:a:busy", "many:a", "many:a"];
        let mut args: Vec<Value> = vec![sha1.into(), 9.into()];
        args.extend(
            keys.iter()
                .chain(&windows)
                .chain(&rest)
                .map(|k| Value::from(*k)),
        );
        let head = redlock_core::__private::batch_head(3, 9, 5).unwrap();
        args.extend([1.into(), head.into()]);
        args.extend([token.into(), 10_000.into(), 0.into(), "0".into(), 3.into()]);
        args
    };
    let set = vec!["many:b".into(), "theirs".into(), "PX".into(), 10_000.into()];
    run(&client, "SET", set).await;
    let refused = run(&client, "EVALSHA", attempt("t1")).await;
    let Value::Array(replies) = refused else {
        panic!("{refused:?}")
    };
    let Value::Array(reply) = &replies[0] else {
        panic!("{replies:?}")
    };
    assert_eq!(reply[0], Value::Integer(0), "{reply:?}");
    let theirs = format!("2:{}", &fred::util::sha1_hash("theirs")[..16]);
    assert_eq!(reply[4], Value::from(theirs), "{reply:?}");
    for key in ["many:a", "many:c"] {
        let value = run(&client, "GET", vec![key.into()]).await;
        assert_eq!(value, Value::Null, "{key} was written by a refused attempt");
    }
    run(&client, "DEL", vec!["many:b".into()]).await;
    let granted = run(&client, "EVALSHA", attempt("t2")).await;
    let Value::Array(replies) = granted else {
        panic!("{granted:?}")
    };
    let Value::Array(reply) = &replies[0] else {
        panic!("{replies:?}")
    };
    assert_eq!(reply[0], Value::Integer(1), "{reply:?}");
    for key in ["many:a", "many:b", "many:c"] {
        let value = run(&client, "GET", vec![key.into()]).await;
        assert_eq!(value, Value::from("t2"), "{key}");
    }
    // EXTEND is script 2: KEYS the lock keys; ARGV token, ttl_ms. many:c is gone.
    run(&client, "DEL", vec!["many:c".into()]).await;
    let mut extend: Vec<Value> = vec![sha1.into(), 3.into()];
    extend.extend(["many:a", "many:b", "many:c"].map(Value::from));
    let head = redlock_core::__private::batch_head(2, 3, 2).unwrap();
    extend.extend([1.into(), head.into()]);
    extend.extend(["t2".into(), 600_000.into()]);
    let refused = run(&client, "EVALSHA", extend).await;
    assert_eq!(
        refused,
        Value::Array(vec![Value::Integer(0)]),
        "an extension with a key of the set gone"
    );
    for key in ["many:a", "many:b"] {
        let Value::Integer(left) = run(&client, "PTTL", vec![key.into()]).await else {
            panic!("PTTL of {key}")
        };
        assert!(
            left <= 10_000,
            "{key} extended to {left} ms with its set's key gone"
        );
    }
}

/// Every `.lua` file under `dir`, in every folder (each slice keeps its own scripts).
fn lua_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(lua_files(&path));
        } else if path.extension().and_then(|e| e.to_str()) == Some("lua") {
            files.push(path);
        }
    }
    files.sort();
    files
}
