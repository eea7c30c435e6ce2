//! `rediss://` against `redis-server` serving TLS with certificates made in the set-up: a
//! private CA, mutual TLS, and the refusals (a server the CA did not sign, a missing client
//! certificate, bad PEM). Built with the `tls-rustls` feature (the default of this crate), and
//! again with `--no-default-features --features tls-native` by `cargo xtask test`.

#![cfg(any(feature = "tls-rustls", feature = "tls-native"))]
#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::time::{Duration, Instant};

use redlock_core::{BuildError, LockError, LockGuard, LockOptions, Redlock, RedlockBuilder};
use redlock_tests::tls::Certificates;
use redlock_tests::{RedisNodes, ServerOptions, lock_everywhere, within};

/// `n` servers serving TLS with `certificates` (and plain TCP on their own port, through which
/// the tests look at the keys); `require`: clients must present a certificate.
fn tls_nodes(n: usize, certificates: &Arc<Certificates>, require: bool) -> RedisNodes {
    RedisNodes::start_opts(n, |_| {
        ServerOptions::default().tls(Arc::clone(certificates), require)
    })
}

fn builder(nodes: &RedisNodes) -> RedlockBuilder {
    Redlock::builder()
        .nodes(nodes.tls_urls())
        .connect_timeout(Duration::from_secs(2))
}

/// A build that must fail after trying to connect: every node refused, within the connect
/// timeout and a margin, with the refusal's reason. Returns the error's text.
async fn refused(builder: RedlockBuilder) -> String {
    let started = Instant::now();
    let error = within("the refused build", builder.build())
        .await
        .unwrap_err();
    assert!(
        matches!(error, BuildError::TooFewReachable { reachable: 0, .. }),
        "{error}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    // The TLS refusal itself is in the error (the client retried it in the background).
    let text = error.to_string();
    assert!(text.contains("(last error: "), "{text}");
    text
}

/// `held`'s token is at `key` on a quorum of nodes (the others' grants may still be on their
/// way, or refused by a release that had not landed there yet); after its release, no node
/// has the key.
async fn holds_then_releases(nodes: &RedisNodes, key: &str, held: LockGuard) {
    let token = held.token().expose().to_owned();
    assert_eq!(nodes.holder(key).await, Some(token));
    held.release().await.unwrap();
    nodes.gone_everywhere(key).await;
}

#[tokio::test]
async fn locks_over_tls_with_a_private_ca_and_wakes_waiters_over_it() {
    let certificates = Arc::new(Certificates::generate());
    let nodes = tls_nodes(3, &certificates, false);
    let build = || builder(&nodes).tls_ca_pem(&certificates.ca_pem).build();
    let (a, b) = (build().await.unwrap(), build().await.unwrap());

    let held = a.lock("tls").await.unwrap();
    // The keys are on the servers (read through their plain ports).
    assert_eq!(
        nodes.holder("tls").await.as_deref(),
        Some(held.token().expose())
    );
    let once = LockOptions::default().retry_count(0);
    assert!(matches!(
        b.lock_with("tls", &once).await,
        Err(LockError::Busy { .. })
    ));

    // A waiter whose retry delay alone would make it wait 10 s is woken by the release's
    // message, which reaches it over its TLS subscriber connections.
    let patient = LockOptions::default()
        .retry_delay(Duration::from_secs(10))
        .retry_jitter(Duration::ZERO)
        .wait_timeout(Duration::from_secs(30));
    let waiting = tokio::spawn(async move { b.lock_with("tls", &patient).await });
    within("the waiter to queue", async {
        while nodes.queued("tls").await.iter().any(|&queued| queued < 1) {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
    .await;
    let released = Instant::now();
    held.release().await.unwrap();
    let next = within("the waiter", waiting).await.unwrap().unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(1),
        "woken {:?} after the release",
        released.elapsed()
    );
    holds_then_releases(&nodes, "tls", next).await;
}

#[tokio::test]
async fn a_server_the_trusted_ca_did_not_sign_is_refused() {
    let certificates = Arc::new(Certificates::generate());
    let nodes = tls_nodes(3, &certificates, false);
    // Trusting another CA only.
    let text = refused(builder(&nodes).tls_ca_pem(&certificates.other_ca_pem)).await;
    if cfg!(not(feature = "tls-native")) {
        assert!(text.contains("UnknownIssuer"), "{text}");
    }
    // Trusting the system's CAs (the default): the private CA is not among them.
    refused(builder(&nodes)).await;
}

#[tokio::test]
async fn mutual_tls_needs_the_client_certificate() {
    let certificates = Arc::new(Certificates::generate());
    let nodes = tls_nodes(3, &certificates, true);
    let text = refused(builder(&nodes).tls_ca_pem(&certificates.ca_pem)).await;
    if cfg!(not(feature = "tls-native")) {
        assert!(text.contains("CertificateRequired"), "{text}");
    }

    let redlock = builder(&nodes)
        .tls_ca_pem(&certificates.ca_pem)
        .tls_client_pem(&certificates.client_pem, &certificates.client_key_pem)
        .build()
        .await
        .unwrap();
    // Every node took the client certificate: the lock lands on all three.
    let held = lock_everywhere(&redlock, &nodes, "mtls", None, &LockOptions::default()).await;
    holds_then_releases(&nodes, "mtls", held).await;
}

#[tokio::test]
async fn bad_tls_settings_are_refused_before_connecting() {
    let certificates = Certificates::generate();
    // Nobody listens there: a build that tried to connect would retry for its connect timeout.
    let unroutable = || {
        Redlock::builder()
            .node(format!("rediss://127.0.0.1:{}", redlock_tests::free_port()))
            .connect_timeout(Duration::from_secs(5))
    };
    let cases = [
        ("not PEM", unroutable().tls_ca_pem("not a certificate")),
        (
            "a key where the CA goes",
            unroutable().tls_ca_pem(&certificates.client_key_pem),
        ),
        (
            "a malformed key",
            unroutable().tls_client_pem(
                &certificates.client_pem,
                "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n",
            ),
        ),
        (
            "another certificate's key",
            unroutable().tls_client_pem(&certificates.ca_pem, &certificates.client_key_pem),
        ),
    ];
    // The key pasted on one line, or with its line breaks written as `\n` (as environment
    // variables and YAML often carry it): a PEM parser's error can quote the whole line.
    let one_line = certificates.client_key_pem.replace('\n', "");
    let escaped = certificates.client_key_pem.replace('\n', "\\n");
    let cases = cases.into_iter().chain([
        (
            "a key on one line",
            unroutable().tls_client_pem(&certificates.client_pem, &one_line),
        ),
        (
            "a key with escaped line breaks",
            unroutable().tls_client_pem(&certificates.client_pem, &escaped),
        ),
        (
            "a key where the CA goes, on one line",
            unroutable().tls_ca_pem(&one_line),
        ),
    ]);
    let key_body: Vec<&str> = certificates
        .client_key_pem
        .lines()
        .filter(|line| !line.starts_with("-----"))
        .collect();
    for (case, builder) in cases {
        // Refused before connecting: a build that connected would have waited for the
        // connect timeout and failed with TooFewReachable.
        let error = builder.build().await.unwrap_err();
        assert!(matches!(error, BuildError::Tls { .. }), "{case}: {error}");
        // The key never shows in the error, as text or as the bytes of its lines.
        let text = error.to_string();
        assert!(!text.contains("AAAA"), "{case}: {text}");
        for line in &key_body {
            assert!(
                !text.contains(&line[..line.len().min(16)]),
                "{case}: {text}"
            );
        }
        let digits = text.chars().filter(char::is_ascii_digit).count();
        assert!(digits < 32, "{case}: {digits} digits in {text}");
    }
}

/// Set in a child run of [`the_given_ca_is_the_only_one_trusted_even_beside_the_system_store`]:
/// the node URLs, then what the child trusts (`system`, or the PEM of a CA to give).
const CHILD_NODES: &str = "REDLOCK_TLS_CHILD_NODES";
const CHILD_CA: &str = "REDLOCK_TLS_CHILD_CA";
const CHILD_NAME: &str = "the_given_ca_is_the_only_one_trusted_even_beside_the_system_store";

/// Runs this test binary again as the child of [`CHILD_NAME`], with `SSL_CERT_FILE` (the
/// system store both TLS stacks read) holding the servers' CA: `Ok` if its build connected,
/// else the refusal it printed.
fn child_connects(
    nodes: &RedisNodes,
    certificates: &Certificates,
    ca: Option<&str>,
) -> Result<(), String> {
    let mut child = std::process::Command::new(std::env::current_exe().unwrap());
    child
        .args([CHILD_NAME, "--exact", "--nocapture", "--test-threads=1"])
        .env("SSL_CERT_FILE", certificates.dir.join("ca.crt"))
        .env(CHILD_NODES, nodes.tls_urls().join(","));
    if let Some(ca) = ca {
        child.env(CHILD_CA, ca);
    }
    let output = child.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    if stdout.contains("TLS-CHILD: connected") {
        return Ok(());
    }
    let refused = stdout
        .lines()
        .find_map(|line| {
            line.split_once("TLS-CHILD: refused: ")
                .map(|(_, error)| error)
        })
        .unwrap_or_else(|| panic!("{stdout}"));
    Err(refused.to_owned())
}

#[tokio::test]
async fn the_given_ca_is_the_only_one_trusted_even_beside_the_system_store() {
    if let Ok(urls) = std::env::var(CHILD_NODES) {
        // The child: build over `urls` trusting the system store, or only the given CA.
        let mut builder = Redlock::builder()
            .nodes(urls.split(','))
            .connect_timeout(Duration::from_secs(2));
        if let Ok(ca) = std::env::var(CHILD_CA) {
            builder = builder.tls_ca_pem(ca);
        }
        match builder.build().await {
            Ok(_) => println!("TLS-CHILD: connected"),
            Err(error) => println!("TLS-CHILD: refused: {error}"),
        }
        return;
    }
    let certificates = Arc::new(Certificates::generate());
    let nodes = tls_nodes(3, &certificates, false);
    // The oracle: with the servers' CA in the system store, trusting the system connects.
    child_connects(&nodes, &certificates, None).unwrap();
    // Given another CA, only it is trusted: the system store's CA no longer counts, and the
    // refusal is the certificate's (not a timeout on a slow machine).
    let refused = child_connects(&nodes, &certificates, Some(&certificates.other_ca_pem))
        .expect_err("trusted the system store beside the given CA");
    let reason = if cfg!(feature = "tls-native") {
        "certificate verify failed"
    } else {
        "UnknownIssuer"
    };
    assert!(refused.contains(reason), "{refused}");
    // Given the servers' CA, it connects.
    child_connects(&nodes, &certificates, Some(&certificates.ca_pem)).unwrap();
}
