//! `#[redlock]` against real servers: the lock is held during the body and released on every
//! exit path.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use redlock_core::{LockError, LockOptions, LostReason, Redlock, redlock};
use redlock_tests::{RedisNodes, free_within, is_free, redlock_with, within};

#[derive(Debug)]
enum AppError {
    #[allow(dead_code)]
    Lock(LockError),
    Domain(&'static str),
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        Self::Lock(error)
    }
}

struct Fixture {
    nodes: RedisNodes,
    redlock: Redlock,
    probe: Redlock,
}

async fn fixture() -> Fixture {
    let nodes = RedisNodes::start(5);
    let redlock = redlock_with(&nodes, LockOptions::default().retry_count(0)).await;
    let probe = redlock_tests::redlock(&nodes).await;
    Fixture {
        nodes,
        redlock,
        probe,
    }
}

#[redlock(resource = "order:{order_id}", redlock = fx.redlock, ttl = "30s")]
async fn checked(fx: &Fixture, order_id: u64, mode: &str) -> Result<bool, AppError> {
    let held = !is_free(&fx.probe, &format!("order:{order_id}")).await;
    match mode {
        "early" => return Ok(held),
        "error" => Err(AppError::Domain("failed"))?,
        "panic" => panic!("body panicked"),
        "hang" => std::future::pending::<()>().await,
        _ => {}
    }
    Ok(held)
}

#[tokio::test]
async fn the_lock_is_held_during_the_body_and_released_on_every_exit() {
    let fx = fixture().await;
    assert!(
        checked(&fx, 1, "normal").await.unwrap(),
        "not held during the body"
    );
    assert!(is_free(&fx.probe, "order:1").await, "not released after Ok");
    assert!(checked(&fx, 2, "early").await.unwrap());
    assert!(
        is_free(&fx.probe, "order:2").await,
        "not released after return"
    );
    assert!(matches!(
        checked(&fx, 3, "error").await,
        Err(AppError::Domain("failed"))
    ));
    assert!(is_free(&fx.probe, "order:3").await, "not released after ?");

    // Panic and cancellation release from the guard's drop, in the background; the ttl is
    // 30 s, so being free within a second proves the release.
    let fx = std::sync::Arc::new(fx);
    let panicking = {
        let fx = fx.clone();
        tokio::spawn(async move { checked(&fx, 4, "panic").await })
    };
    assert!(
        within("the panicking call", panicking)
            .await
            .unwrap_err()
            .is_panic()
    );
    assert!(free_within(&fx.probe, "order:4").await < Duration::from_secs(1));

    let cancelled = tokio::time::timeout(Duration::from_millis(300), checked(&fx, 5, "hang")).await;
    assert!(cancelled.is_err());
    assert!(free_within(&fx.probe, "order:5").await < Duration::from_secs(1));
}

static RUNS: AtomicU32 = AtomicU32::new(0);

#[redlock(resource = "job:{name}", pool = "macro-test-pool", retry_count = 0)]
async fn job(name: &str) -> Result<(), LockError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

#[tokio::test]
async fn a_busy_resource_skips_the_body_and_returns_the_lock_error() {
    let fx = fixture().await;
    redlock_core::registry::register("macro-test-pool", fx.redlock.clone());
    job("nightly").await.unwrap();
    assert_eq!(RUNS.load(Ordering::SeqCst), 1);
    let holder = fx.probe.lock("job:nightly").await.unwrap();
    let error = job("nightly").await.unwrap_err();
    assert!(error.is_busy(), "{error}");
    assert_eq!(
        RUNS.load(Ordering::SeqCst),
        1,
        "the body ran without the lock"
    );
    holder.release().await.unwrap();
    redlock_core::registry::unregister("macro-test-pool");
    assert!(matches!(
        job("nightly").await,
        Err(LockError::NotRegistered(_))
    ));
}

/// A report that runs on one replica at a time and is skipped by the others.
#[redlock(resource = "report:{day}", redlock = fx.redlock, on_busy = "skip")]
async fn report(fx: &Fixture, day: String, ran: &AtomicU32) -> Result<Option<usize>, AppError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(Some(day.len()))
}

/// The same with a success type whose default is the skipped value.
#[redlock(resource = "report:{day}", redlock = fx.redlock, on_busy = "skip")]
async fn report_rows(fx: &Fixture, day: &str, ran: &AtomicU32) -> Result<Vec<String>, LockError> {
    ran.fetch_add(1, Ordering::SeqCst);
    Ok(vec![day.to_owned()])
}

#[tokio::test]
async fn on_busy_skip_skips_the_body_of_a_busy_resource_and_returns_other_errors() {
    let mut fx = fixture().await;
    let ran = AtomicU32::new(0);
    assert_eq!(report(&fx, "mon".into(), &ran).await.unwrap(), Some(3));
    assert_eq!(report_rows(&fx, "mon", &ran).await.unwrap(), ["mon"]);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "a free resource runs the body"
    );

    // Held elsewhere: the body does not run, and the call is not an error.
    let holder = fx.probe.lock("report:mon").await.unwrap();
    assert_eq!(report(&fx, "mon".into(), &ran).await.unwrap(), None);
    assert_eq!(
        report_rows(&fx, "mon", &ran).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        ran.load(Ordering::SeqCst),
        2,
        "the body ran without the lock"
    );
    // Another resource is not affected.
    assert_eq!(report(&fx, "tue".into(), &ran).await.unwrap(), Some(3));
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    holder.release().await.unwrap();

    // Other lock errors are still errors: invalid input (nothing sent) ...
    let long = "x".repeat(redlock_core::MAX_RESOURCE_LEN + 1);
    let error = report(&fx, long, &ran).await.unwrap_err();
    assert!(
        matches!(error, AppError::Lock(LockError::Invalid(_))),
        "{error:?}"
    );
    // ... and a cluster that cannot form a quorum (3 of 5 nodes down).
    for server in &mut fx.nodes.servers[..3] {
        server.kill();
    }
    let error = within("an unavailable cluster", report(&fx, "mon".into(), &ran))
        .await
        .unwrap_err();
    assert!(
        matches!(error, AppError::Lock(ref e) if e.is_unavailable()),
        "{error:?}"
    );
    let error = report_rows(&fx, "mon", &ran).await.unwrap_err();
    assert!(error.is_unavailable(), "{error}");
    assert_eq!(ran.load(Ordering::SeqCst), 3, "a body ran without the lock");
}

struct Account {
    id: u32,
}

impl Account {
    #[redlock(resource = "account:{self.id}:{{x}}", redlock = handle)]
    async fn touch(&self, handle: &Redlock, fx: &Fixture) -> Result<bool, LockError> {
        Ok(!is_free(&fx.probe, &format!("account:{}:{{x}}", self.id)).await)
    }
}

#[tokio::test]
async fn methods_fields_and_literal_braces_interpolate() {
    let fx = fixture().await;
    let account = Account { id: 7 };
    assert!(account.touch(&fx.redlock, &fx).await.unwrap());
    assert!(is_free(&fx.probe, "account:7:{x}").await);
}

#[redlock(resource = "nested:{id}", redlock = fx.redlock, fencing, guard = lock)]
async fn outer(fx: &Fixture, id: u64, inner_reentrant: bool) -> Result<(u64, u64), AppError> {
    let mine = lock.fencing_token().unwrap();
    let theirs = if inner_reentrant {
        inner(fx, id).await?
    } else {
        inner_not_reentrant(fx, id).await?
    };
    Ok((mine, theirs))
}

#[redlock(resource = "nested:{id}", redlock = fx.redlock, fencing, guard = lock)]
async fn inner(fx: &Fixture, id: u64) -> Result<u64, AppError> {
    assert!(!is_free(&fx.probe, &format!("nested:{id}")).await);
    Ok(lock.fencing_token().unwrap())
}

#[redlock(resource = "nested:{id}", redlock = fx.redlock, reentrant = false)]
async fn inner_not_reentrant(fx: &Fixture, id: u64) -> Result<u64, AppError> {
    let _ = (fx, id);
    Ok(0)
}

#[tokio::test]
async fn nested_annotated_functions_on_one_resource_share_the_lock() {
    let fx = fixture().await;
    let (mine, theirs) = within("nested calls", outer(&fx, 1, true)).await.unwrap();
    assert_eq!(mine, theirs, "the inner call took a second lock");
    assert!(
        is_free(&fx.probe, "nested:1").await,
        "not released after the outer fn"
    );
    // With `reentrant = false` the inner call is another holder: busy, not a deadlock.
    let error = within("nested calls", outer(&fx, 2, false))
        .await
        .unwrap_err();
    assert!(
        matches!(error, AppError::Lock(ref e) if e.is_busy()),
        "{error:?}"
    );
    assert!(is_free(&fx.probe, "nested:2").await);
}

/// Holds `charge:{id}` for 300 ms and counts the bodies inside at once.
#[redlock(resource = "charge:{id}", redlock = fx.redlock)]
async fn charge(fx: &Fixture, id: u64, inside: &AtomicU32) -> Result<u32, AppError> {
    let _ = id;
    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
    tokio::time::sleep(Duration::from_millis(300)).await;
    inside.fetch_sub(1, Ordering::SeqCst);
    let _ = fx;
    Ok(now)
}

#[tokio::test]
async fn sibling_calls_in_one_task_exclude_each_other_while_nested_calls_re_enter() {
    let fx = fixture().await;
    let inside = AtomicU32::new(0);
    // `join!` polls both in one task; the second asks once the first holds (reentrancy
    // keyed on the task let it in).
    let (first, second) = within("sibling calls", async {
        tokio::join!(charge(&fx, 1, &inside), async {
            tokio::time::sleep(Duration::from_millis(100)).await;
            charge(&fx, 1, &inside).await
        })
    })
    .await;
    let entered = [&first, &second].iter().filter(|r| r.is_ok()).count();
    assert_eq!(entered, 1, "siblings both entered: {first:?} {second:?}");
    let refused = if first.is_err() { first } else { second };
    assert!(
        matches!(refused, Err(AppError::Lock(ref e)) if e.is_busy()),
        "{refused:?}"
    );
    // Nested calls still share the lock (see nested_annotated_functions_…), and a sibling
    // on another resource is not affected.
    let (one, two) = tokio::join!(charge(&fx, 2, &inside), charge(&fx, 3, &inside));
    assert!(one.is_ok() && two.is_ok());
    assert!(is_free(&fx.probe, "charge:1").await);
}

#[redlock(resource = "long:{id}", redlock = fx.redlock, ttl = "300ms", auto_extend)]
async fn long_work(fx: &Fixture, id: u64, lose_it: bool) -> Result<bool, AppError> {
    if lose_it {
        fx.nodes.delete(&format!("long:{id}")).await;
        std::future::pending::<()>().await;
    }
    tokio::time::sleep(Duration::from_millis(900)).await;
    Ok(!is_free(&fx.probe, &format!("long:{id}")).await)
}

#[tokio::test]
async fn auto_extend_holds_past_the_ttl_and_stops_the_body_when_lost() {
    let fx = fixture().await;
    let held = within("long work", long_work(&fx, 1, false)).await.unwrap();
    assert!(held, "the lock ran out during a body 3x its ttl");
    let error = within("lost work", long_work(&fx, 2, true))
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            AppError::Lock(LockError::Lost {
                reason: LostReason::Refused(_),
                ..
            })
        ),
        "{error:?}"
    );
}

/// A reader: its body meets the other reader and the writer at `inside`, and stays until the
/// writer has tried (`done`). Not reentrant: the two readers of one task take two locks.
#[redlock(resource = "catalog:{id}", redlock = fx.redlock, mode = "read", reentrant = false, guard = lock)]
async fn read_catalog(
    fx: &Fixture,
    id: u64,
    inside: &tokio::sync::Barrier,
    done: &tokio::sync::Barrier,
) -> Result<Option<redlock_core::Mode>, AppError> {
    inside.wait().await;
    done.wait().await;
    Ok(lock.mode())
}

#[redlock(resource = "catalog:{id}", redlock = fx.redlock, mode = "write", guard = lock)]
async fn write_catalog(fx: &Fixture, id: u64) -> Result<Option<redlock_core::Mode>, AppError> {
    Ok(lock.mode())
}

#[tokio::test]
async fn mode_read_lets_readers_share_and_mode_write_excludes_them() {
    use redlock_core::Mode;
    let fx = fixture().await;
    // Both readers must be inside their bodies at once to pass the barrier: with an
    // exclusive lock the second would be refused (retry_count 0) and the barrier never met.
    let (inside, done) = (tokio::sync::Barrier::new(3), tokio::sync::Barrier::new(3));
    let readers = async {
        tokio::join!(
            read_catalog(&fx, 1, &inside, &done),
            read_catalog(&fx, 1, &inside, &done),
            async {
                inside.wait().await;
                // Both readers hold now: a writer is refused.
                let writer = write_catalog(&fx, 1).await;
                done.wait().await;
                writer
            }
        )
    };
    let (first, second, writer) = within("two readers and a writer", readers).await;
    assert_eq!(first.unwrap(), Some(Mode::ProtectedRead));
    assert_eq!(second.unwrap(), Some(Mode::ProtectedRead));
    assert!(
        matches!(writer, Err(AppError::Lock(ref e)) if e.is_busy()),
        "{writer:?}"
    );
    // Once they released, the writer takes it.
    assert_eq!(write_catalog(&fx, 1).await.unwrap(), Some(Mode::Exclusive));
}

/// The literal durations `#[redlock]` refuses at compile time (tests/macro-ui/ui/fail) are refused by
/// `LockOptions::validate` too, and the boundaries it accepts (tests/macro-ui/ui/pass/
/// duration_boundaries.rs) validate: this binds the macro's copies of core's limits to core.
#[test]
fn compile_time_duration_checks_agree_with_validate() {
    use redlock_core::InvalidInput;
    use redlock_core::{DRIFT_FLOOR, MAX_TTL};

    // The macro's copies (redlock-macros/src/args.rs: MAX_TTL_MS, DRIFT_FLOOR).
    assert_eq!(MAX_TTL, Duration::from_millis(86_400_000));
    assert_eq!(DRIFT_FLOOR, Duration::from_millis(2));
    let validate = |ttl_ms: u64, factor: f64| {
        LockOptions::default()
            .ttl(Duration::from_millis(ttl_ms))
            .drift_factor(factor)
            .validate()
    };

    // Refused by the macro; without `drift_factor` it checks at factor 0, so core must refuse
    // those at every factor.
    for factor in [0.0, 0.01, 0.4, 0.49] {
        assert_eq!(validate(0, factor), Err(InvalidInput::ZeroTtl));
        for ms in [1, 2] {
            assert!(
                matches!(validate(ms, factor), Err(InvalidInput::TtlTooShort { .. })),
                "{ms} ms at {factor}"
            );
        }
        for ms in [86_400_001, 30_000_000_000] {
            assert!(
                matches!(validate(ms, factor), Err(InvalidInput::TtlAboveCap { .. })),
                "{ms} ms at {factor}"
            );
        }
    }
    assert!(matches!(
        validate(3, 0.4),
        Err(InvalidInput::TtlTooShort { .. })
    ));
    // The macro's drift rule (`ttl <= ttl.mul_f64(factor) + 2 ms`) refuses only what core does.
    for factor in [0.0, 0.01, 0.25, 0.4, 0.49] {
        for ms in 1..=20 {
            let ttl = Duration::from_millis(ms);
            if ttl <= ttl.mul_f64(factor) + DRIFT_FLOOR {
                assert!(validate(ms, factor).is_err(), "{ms} ms at {factor}");
            }
        }
    }
    assert_eq!(
        LockOptions::default()
            .auto_extend(true)
            .max_hold(Duration::ZERO)
            .validate(),
        Err(InvalidInput::ZeroMaxHold)
    );

    // Accepted by the macro.
    for (ms, factor) in [(3, 0.0), (3, 0.01), (86_400_000, 0.0), (86_400_000, 0.01)] {
        validate(ms, factor).unwrap();
    }
    // 4 ms at 0.4 leaves 0.4 ms, no more than the default lost margin, but a handle's smaller
    // margin makes it valid: the macro leaves the margin check to run time.
    assert!(matches!(
        validate(4, 0.4),
        Err(InvalidInput::LostMargin { .. })
    ));
    LockOptions::default()
        .ttl(Duration::from_millis(4))
        .drift_factor(0.4)
        .lost_margin(Duration::from_micros(100))
        .validate()
        .unwrap();
}

#[redlock(resource = "export:{tenant}", redlock = fx.redlock, permits = 2, guard = info)]
async fn export(
    fx: &Fixture,
    tenant: &str,
    go: &tokio::sync::watch::Receiver<bool>,
) -> Result<u32, LockError> {
    assert_eq!(info.permits(), Some(2));
    let slot = info.slot().unwrap();
    let _ = (&fx.nodes, tenant);
    let _ = go.clone().wait_for(|go| *go).await;
    Ok(slot)
}

#[tokio::test]
async fn permits_let_two_bodies_in_and_refuse_a_third() {
    let fx = fixture().await;
    let (open, go) = tokio::sync::watch::channel(false);
    let (first, second, third) = within("the three bodies", async {
        tokio::join!(export(&fx, "t", &go), export(&fx, "t", &go), async {
            // Once the two others are in, the third is busy (no retries on this handle).
            tokio::time::sleep(Duration::from_millis(300)).await;
            let third = export(&fx, "t", &go).await;
            open.send_replace(true);
            third
        })
    })
    .await;
    let mut slots = [first.unwrap(), second.unwrap()];
    slots.sort_unstable();
    assert_eq!(slots, [0, 1]);
    assert!(third.unwrap_err().is_busy());
}

/// `resources = [..]`: both accounts locked together for the body, all or none, released
/// after it; a transfer to the same account locks it once.
#[redlock(resources = ["account:{from}", "account:{to}"], redlock = fx.redlock, guard = lock)]
async fn transfer(fx: &Fixture, from: u32, to: u32) -> Result<Vec<String>, AppError> {
    let held: Vec<String> = lock.resources().into_iter().map(str::to_owned).collect();
    for resource in &held {
        assert!(
            !is_free(&fx.probe, resource).await,
            "{resource} not held in the body"
        );
    }
    Ok(held)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resources_lock_every_template_together() {
    let fx = fixture().await;
    let held = transfer(&fx, 7, 3).await.unwrap();
    assert_eq!(held, ["account:3", "account:7"]);
    assert!(is_free(&fx.probe, "account:3").await && is_free(&fx.probe, "account:7").await);
    assert_eq!(transfer(&fx, 5, 5).await.unwrap(), ["account:5"]);
    // One of them busy: the whole lock is refused, and the other was not left taken.
    let busy = fx.probe.lock("account:9").await.unwrap();
    assert!(matches!(
        transfer(&fx, 8, 9).await,
        Err(AppError::Lock(LockError::Busy { .. }))
    ));
    assert!(
        fx.nodes
            .values("account:8")
            .await
            .iter()
            .all(Option::is_none)
    );
    busy.release().await.unwrap();
}
