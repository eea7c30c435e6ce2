//! Liveness of a job that skips when busy: K replicas fire the guide's skip job
//! (`retry_count = 0`, a minimum hold, skip on `LockError::Busy`) at the same tick, and it must
//! run on exactly one of them, every tick; the same in a lock mode, for a lock of several
//! resources, and for a semaphore's permits (run on exactly as many replicas as permits). The replicas split the vote when each is nearer some
//! nodes than the others; a split vote is not `Busy` (nobody holds the resource), so they
//! attempt again after random delays until one has it. Against 5 real redis-server processes,
//! each replica seeing them through its own proxies.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use redlock_core::{LockError, LockOptions, Mode, Redlock};
use redlock_tests::proxy::{Direction, Fault, Proxy};
use redlock_tests::{RedisNodes, proxy_urls, within};

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One replica: its handle, over its own proxies (its view of the network).
struct Replica {
    redlock: Redlock,
    proxies: Vec<Proxy>,
}

async fn replicas(nodes: &RedisNodes, k: usize) -> Vec<Replica> {
    let mut replicas = Vec::new();
    for _ in 0..k {
        let proxies = nodes.proxies();
        let redlock = Redlock::builder()
            .nodes(proxy_urls(&proxies))
            .build()
            .await
            .unwrap();
        replicas.push(Replica { redlock, proxies });
    }
    replicas
}

/// What one tick gave: replicas that ran the job, skipped it, or failed.
#[derive(Debug, Default)]
struct Tick {
    ran: usize,
    skipped: usize,
    errors: Vec<String>,
}

/// How a skip job takes its lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Job {
    /// The plain lock, with a minimum hold.
    Plain,
    /// In mode EX (no minimum hold in a mode: the work outlasts the attempts after a split).
    Exclusive,
    /// Two resources at once (no minimum hold either).
    Several,
    /// One of 2 permits of a semaphore, with a minimum hold.
    Permit,
}

impl Job {
    /// On how many replicas the job runs each tick.
    fn runs(self) -> usize {
        match self {
            Self::Permit => 2,
            Self::Plain | Self::Exclusive | Self::Several => 1,
        }
    }
}

/// Every replica fires the plain skip job on `resource` at once.
async fn tick(replicas: &[Replica], resource: &str) -> Tick {
    tick_of(replicas, resource, Job::Plain).await
}

/// Every replica fires `job` on `resource` at once.
async fn tick_of(replicas: &[Replica], resource: &str, job: Job) -> Tick {
    let once = LockOptions::default()
        .ttl(Duration::from_secs(5))
        .retry_count(0);
    let held = Duration::from_secs(2);
    let (options, work) = match job {
        Job::Plain => (once.lock_at_least_for(held), ms(20)),
        Job::Permit => (once.lock_at_least_for(held), ms(20)),
        // Without a minimum hold, the work lasts longer than a split's attempts (1.26 s).
        Job::Exclusive => (once, held),
        Job::Several => (once, held),
    };
    let start = Arc::new(tokio::sync::Barrier::new(replicas.len()));
    let fired = replicas.iter().map(|replica| {
        let (redlock, job_options, start) =
            (replica.redlock.clone(), options.clone(), Arc::clone(&start));
        let resource = resource.to_owned();
        tokio::spawn(async move {
            start.wait().await;
            let locked = match job {
                Job::Several => {
                    let resources = [resource.clone(), format!("{resource}:b")];
                    redlock.lock_many_with(&resources, &job_options).await
                }
                Job::Exclusive => {
                    let exclusive = Mode::Exclusive;
                    redlock
                        .lock_mode_with(&resource, exclusive, &job_options)
                        .await
                }
                Job::Permit => {
                    let semaphore = redlock.semaphore(resource.as_str(), 2);
                    semaphore.acquire_with(&job_options).await
                }
                _ => redlock.lock_with(&resource, &job_options).await,
            };
            match locked {
                Ok(guard) => {
                    // The job's work, then the release (the key stays for the minimum hold).
                    tokio::time::sleep(work).await;
                    guard.release().await.map(|_| true)
                }
                Err(error) if error.is_busy() => Ok(false),
                Err(error) => Err(error),
            }
        })
    });
    let mut tick = Tick::default();
    for result in within(
        "every replica's tick",
        futures_util::future::join_all(fired),
    )
    .await
    {
        match result.unwrap() {
            Ok(true) => tick.ran += 1,
            Ok(false) => tick.skipped += 1,
            Err(error) => tick.errors.push(error.to_string()),
        }
    }
    tick
}

/// Replica `r` is `far` farther from every node outside its group (node `i` is in group
/// `i % k`), plus up to `jitter` more, drawn per node and replica.
fn skew(replicas: &[Replica], far: Duration, jitter: Duration, rng: &mut impl Rng) {
    let k = replicas.len();
    for (r, replica) in replicas.iter().enumerate() {
        for (i, proxy) in replica.proxies.iter().enumerate() {
            let extra = if jitter.is_zero() {
                Duration::ZERO
            } else {
                rng.random_range(Duration::ZERO..=jitter)
            };
            let delay = if i % k == r { extra } else { far + extra };
            let fault = if delay.is_zero() {
                Fault::Pass
            } else {
                Fault::Delay(delay)
            };
            proxy.set(Direction::Request, fault);
        }
    }
}

/// The liveness property of one tick: the job ran on exactly one replica, and none failed.
fn check_tick(tick: &Tick) -> Result<(), String> {
    check_tick_of(tick, 1)
}

/// The liveness property of one tick of a job that runs on `runs` replicas at once: it ran on
/// exactly that many, and none failed.
fn check_tick_of(tick: &Tick, runs: usize) -> Result<(), String> {
    if tick.ran == runs && tick.errors.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "ran on {} replica(s), skipped on {}, errors {:?}",
            tick.ran, tick.skipped, tick.errors
        ))
    }
}

/// Runs `ticks` ticks and checks each ([`check_tick`]).
async fn every_tick_runs_once(replicas: &[Replica], name: &str, ticks: usize) {
    every_tick_runs(replicas, name, ticks, Job::Plain).await;
}

/// Runs `ticks` ticks of `job` and checks each ([`check_tick_of`]).
async fn every_tick_runs(replicas: &[Replica], name: &str, ticks: usize, job: Job) {
    for t in 0..ticks {
        let tick = tick_of(replicas, &format!("{name}:{t}"), job).await;
        if let Err(error) = check_tick_of(&tick, job.runs()) {
            panic!("{name} ({job:?}), tick {t}: {error}");
        }
    }
}

/// `job` fired by `k` replicas, each 5 ms farther from the nodes outside its group: without
/// the attempts after a split vote, most ticks run on too few replicas.
async fn a_skewed_skip_job_runs_every_tick(job: Job, k: usize) {
    let nodes = RedisNodes::start(5);
    let replicas = replicas(&nodes, k).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
    skew(&replicas, ms(5), Duration::ZERO, &mut rng);
    every_tick_runs(&replicas, "skewed", 6, job).await;
}

#[tokio::test]
async fn a_skip_job_in_a_mode_fired_by_three_replicas_runs_once_per_tick() {
    a_skewed_skip_job_runs_every_tick(Job::Exclusive, 3).await;
}

#[tokio::test]
async fn a_skip_job_on_two_resources_fired_by_three_replicas_runs_once_per_tick() {
    a_skewed_skip_job_runs_every_tick(Job::Several, 3).await;
}

#[tokio::test]
async fn a_skip_job_on_two_permits_fired_by_four_replicas_runs_twice_per_tick() {
    a_skewed_skip_job_runs_every_tick(Job::Permit, 4).await;
}

#[test]
fn the_tick_check_rejects_a_tick_run_nowhere_twice_or_with_an_error() {
    let tick = |ran, skipped, errors: &[&str]| Tick {
        ran,
        skipped,
        errors: errors.iter().map(|e| (*e).to_owned()).collect(),
    };
    assert!(check_tick(&tick(1, 2, &[])).is_ok());
    assert!(check_tick(&tick(0, 3, &[])).is_err(), "ran nowhere");
    assert!(check_tick(&tick(2, 1, &[])).is_err(), "ran twice");
    assert!(
        check_tick(&tick(1, 1, &["split vote"])).is_err(),
        "an error"
    );
}

/// A vote that stays split: two other holders keep two nodes each of five (their keys, not
/// ours: they never release), the fifth is free. No holder can have a quorum, so it is no
/// `Busy`: `LockError::SplitVote`, once an attempt after the split found the same holders
/// (contenders would have drawn new tokens), and the attempt left nothing on the free node.
#[tokio::test]
async fn a_split_that_stays_split_is_reported_as_such() {
    let nodes = RedisNodes::start(5);
    let redlock = redlock_tests::redlock(&nodes).await;
    let urls = nodes.urls();
    for (url, holder) in urls.iter().zip(["x", "x", "y", "y"]) {
        let client = redlock_tests::plain_client(url).await;
        let () = fred::interfaces::KeysInterface::set(&client, "stuck", holder, None, None, false)
            .await
            .unwrap();
    }
    let once = LockOptions::default().retry_count(0);
    let error = within("the split vote", redlock.lock_with("stuck", &once))
        .await
        .unwrap_err();
    match &error {
        // The attempt after the split named the same holders: no contender's, which would
        // have drawn new tokens, so no further attempt.
        LockError::SplitVote { attempts, .. } => assert_eq!(*attempts, 2, "{error}"),
        other => panic!("a lasting split was reported as {other}"),
    }
    assert!(!error.is_busy());
    assert_eq!(nodes.values("stuck").await[4], None);
}

#[tokio::test]
async fn a_skip_job_fired_by_three_replicas_runs_once_per_tick() {
    let nodes = RedisNodes::start(5);
    let replicas = replicas(&nodes, 3).await;
    let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
    // Each replica 5 ms farther from the nodes outside its group: without the attempts after
    // a split vote, most ticks run nowhere.
    skew(&replicas, ms(5), Duration::ZERO, &mut rng);
    every_tick_runs_once(&replicas, "skewed", 12).await;
    // Random skews.
    for round in 0..4 {
        skew(&replicas, ms(rng.random_range(0..=8)), ms(3), &mut rng);
        every_tick_runs_once(&replicas, &format!("random{round}"), 3).await;
    }
}

#[tokio::test]
async fn a_skip_job_runs_once_per_tick_with_a_node_down() {
    let mut nodes = RedisNodes::start(5);
    let replicas = replicas(&nodes, 3).await;
    nodes.servers[4].kill();
    let mut rng = rand::rngs::StdRng::seed_from_u64(rand::random());
    // Four nodes for a quorum of three: two replicas can split them two and two.
    skew(&replicas, ms(5), Duration::ZERO, &mut rng);
    every_tick_runs_once(&replicas, "down", 12).await;
}

/// The oracle of this file fails a tick that ran nowhere: a busy error on every replica,
/// with nobody holding the resource, is what it must reject.
#[tokio::test]
async fn the_check_rejects_a_tick_that_ran_nowhere() {
    let nodes = RedisNodes::start(3);
    let replicas = replicas(&nodes, 2).await;
    // A foreign holder keeps the resource: every replica skips; the tick ran nowhere.
    for url in nodes.urls() {
        redlock_tests::foreign_set_nx(&url, "nowhere:0").await;
    }
    let tick = tick(&replicas, "nowhere:0").await;
    assert_eq!((tick.ran, tick.skipped), (0, 2), "{tick:?}");
    let checked = tokio::spawn(async move {
        every_tick_runs_once(&replicas, "nowhere", 1).await;
    })
    .await;
    assert!(checked.is_err(), "the check passed a tick that ran nowhere");
}
