//! The metrics of redlock-core's `metrics` feature, read through `metrics-util`'s debugging
//! recorder, against real nodes. Each test uses resource classes of its own, so that the
//! process-wide recorder's figures of one test never count in another's.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use redlock_core::{LockError, LockOptions, Redlock};
use redlock_tests::{RedisNodes, redlock, within};

/// One metric's accumulated value.
#[derive(Debug, Clone)]
enum Value {
    Counter(u64),
    Gauge(f64),
    Histogram(Vec<f64>),
}

/// A metric: its name and its sorted labels.
type MetricKey = (String, Vec<(String, String)>);

/// The process-wide debugging recorder, with the figures of every snapshot so far added up
/// (a snapshot resets counters and gauges to zero and drains histograms).
struct Recorded {
    snapshotter: Snapshotter,
    totals: Mutex<HashMap<MetricKey, Value>>,
}

fn recorded() -> &'static Recorded {
    static RECORDED: OnceLock<Recorded> = OnceLock::new();
    RECORDED.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        redlock_core::describe_metrics();
        Recorded {
            snapshotter,
            totals: Mutex::default(),
        }
    })
}

impl Recorded {
    /// The values of `name` whose labels include every one of `labels`.
    fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<Value> {
        let mut totals = self.totals.lock().unwrap();
        for (key, _, _, value) in self.snapshotter.snapshot().into_vec() {
            let key = key.key();
            let mut key_labels: Vec<(String, String)> = key
                .labels()
                .map(|l| (l.key().to_owned(), l.value().to_owned()))
                .collect();
            key_labels.sort();
            let entry = (key.name().to_owned(), key_labels);
            let total = totals.remove(&entry);
            let value = match (total, value) {
                (Some(Value::Counter(a)), DebugValue::Counter(b)) => Value::Counter(a + b),
                (None, DebugValue::Counter(b)) => Value::Counter(b),
                (Some(Value::Gauge(a)), DebugValue::Gauge(b)) => Value::Gauge(a + b.0),
                (None, DebugValue::Gauge(b)) => Value::Gauge(b.0),
                (Some(Value::Histogram(mut a)), DebugValue::Histogram(b)) => {
                    a.extend(b.into_iter().map(|v| v.0));
                    Value::Histogram(a)
                }
                (None, DebugValue::Histogram(b)) => {
                    Value::Histogram(b.into_iter().map(|v| v.0).collect())
                }
                (total, value) => panic!("{total:?} then {value:?}"),
            };
            totals.insert(entry, value);
        }
        totals
            .iter()
            .filter(|((n, key_labels), _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| key_labels.iter().any(|(kk, vv)| kk == k && vv == v))
            })
            .map(|(_, value)| value.clone())
            .collect()
    }

    /// The sum of the counters `name` with `labels`.
    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.find(name, labels)
            .into_iter()
            .map(|v| match v {
                Value::Counter(c) => c,
                other => panic!("{name} is not a counter: {other:?}"),
            })
            .sum()
    }

    /// The sum of the gauges `name` with `labels`.
    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.find(name, labels)
            .into_iter()
            .map(|v| match v {
                Value::Gauge(g) => g,
                other => panic!("{name} is not a gauge: {other:?}"),
            })
            .sum()
    }

    /// Every sample of the histograms `name` with `labels`.
    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.find(name, labels)
            .into_iter()
            .flat_map(|v| match v {
                Value::Histogram(h) => h,
                other => panic!("{name} is not a histogram: {other:?}"),
            })
            .collect()
    }
}

/// Each node's count of `vote` in `redlock_node_votes_total`, in node order.
fn votes(redlock: &Redlock, vote: &str) -> Vec<u64> {
    redlock
        .node_labels()
        .map(|node| {
            recorded().counter(
                "redlock_node_votes_total",
                &[("node", node), ("vote", vote)],
            )
        })
        .collect()
}

fn sum(a: &[u64], b: &[u64]) -> Vec<u64> {
    a.iter().zip(b).map(|(a, b)| a + b).collect()
}

/// Each node's count of every vote in `redlock_node_votes_total`, in node order.
fn all_votes(redlock: &Redlock) -> Vec<u64> {
    ["acquired", "held", "failed", "undecided"]
        .iter()
        .map(|vote| votes(redlock, vote))
        .fold(vec![0; redlock.node_labels().count()], |all, v| {
            sum(&all, &v)
        })
}

fn once() -> LockOptions {
    LockOptions::default()
        .retry_count(1)
        .retry_delay(Duration::from_millis(10))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acquisition_a_contender_and_the_release_are_measured() {
    let m = recorded();
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let class = [("resource_class", "m1")];

    let guard = a.lock_with("m1:order:7", &once()).await.unwrap();
    assert_eq!(m.gauge("redlock_held", &class), 1.0);
    let acquired = [
        ("resource_class", "m1"),
        ("outcome", "acquired"),
        ("mode", "plain"),
    ];
    assert_eq!(
        m.samples("redlock_acquire_duration_seconds", &acquired)
            .len(),
        1
    );
    assert_eq!(m.samples("redlock_acquire_attempts", &class), vec![1.0]);
    // Every node voted once: granted, or undecided when the quorum was reached without it
    // (or failed, when a loaded machine made its call miss the node timeout).
    assert_eq!(all_votes(&a), vec![1; 3]);
    assert!(votes(&a, "acquired").iter().sum::<u64>() >= 2);
    assert_eq!(votes(&a, "held"), vec![0; 3], "nobody else held it");
    // The full resource is never a label value.
    assert!(
        m.find("redlock_held", &[("resource_class", "m1:order:7")])
            .is_empty()
    );

    // A contender: two attempts, and the free one right after it joined the waiter queue:
    // three rounds, each refused by every node that voted.
    let (acquired_before, votes_before) = (votes(&a, "acquired"), all_votes(&a));
    let busy = b.lock_with("m1:order:7", &once()).await.unwrap_err();
    assert!(busy.is_busy(), "{busy}");
    let refused = [("resource_class", "m1"), ("outcome", "busy")];
    assert_eq!(
        m.samples("redlock_acquire_duration_seconds", &refused)
            .len(),
        1
    );
    assert_eq!(
        m.samples("redlock_acquire_attempts", &class),
        vec![1.0, 2.0]
    );
    assert_eq!(m.counter("redlock_contended_total", &class), 1);
    // Each node voted once in each round; a refused round has a holder's vote in it.
    let rounds: Vec<u64> = all_votes(&a)
        .iter()
        .zip(&votes_before)
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(rounds, vec![3; 3]);
    assert_eq!(votes(&a, "acquired"), acquired_before);
    assert!(votes(&a, "held").iter().sum::<u64>() >= 3);

    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    assert_eq!(m.gauge("redlock_held", &class), 0.0);
    let holds = m.samples("redlock_hold_duration_seconds", &class);
    assert_eq!(holds.len(), 1);
    assert!((0.1..5.0).contains(&holds[0]), "{holds:?}");
    assert_eq!(m.counter("redlock_lost_total", &class), 0);
    assert_eq!(m.counter("redlock_release_unconfirmed_total", &class), 0);
    assert_eq!(m.counter("redlock_contended_total", &class), 1);

    // A dropped guard leaves the gauge too, once its background release ran.
    let dropped = a.lock_with("m1:order:8", &once()).await.unwrap();
    assert_eq!(m.gauge("redlock_held", &class), 1.0);
    drop(dropped);
    assert_eq!(m.gauge("redlock_held", &class), 0.0);
    assert_eq!(m.samples("redlock_hold_duration_seconds", &class).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losses_and_extensions_are_measured_by_reason() {
    let m = recorded();
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let class = [("resource_class", "m2")];

    // Expired: held past its validity, then released.
    let short = once().ttl(Duration::from_millis(150));
    let guard = a.lock_with("m2:expires", &short).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = guard.release().await.unwrap();
    assert!(!released.was_held());
    let expired = [("resource_class", "m2"), ("reason", "expired")];
    assert_eq!(m.counter("redlock_lost_total", &expired), 1);

    // Extended, then refused once the keys are gone from every node.
    let guard = a.lock_with("m2:refused", &once()).await.unwrap();
    guard.extend(Duration::from_secs(10)).await.unwrap();
    let extended = [("resource_class", "m2"), ("result", "extended")];
    assert_eq!(m.counter("redlock_extensions_total", &extended), 1);
    nodes.delete(&a.key_for("m2:refused")).await;
    let error = guard.extend(Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(error, LockError::Lost { .. }), "{error}");
    let refused = [("resource_class", "m2"), ("result", "refused")];
    assert_eq!(m.counter("redlock_extensions_total", &refused), 1);
    let lost = [("resource_class", "m2"), ("reason", "refused")];
    assert_eq!(m.counter("redlock_lost_total", &lost), 1);
    // An extension of a lost lock sends nothing, and says so.
    assert!(guard.extend(Duration::from_secs(10)).await.is_err());
    let after = [("resource_class", "m2"), ("result", "lost")];
    assert_eq!(m.counter("redlock_extensions_total", &after), 1);
    drop(guard);

    // A release on time is not a loss.
    let guard = a.lock_with("m2:on-time", &once()).await.unwrap();
    guard.release().await.unwrap();
    assert_eq!(m.counter("redlock_lost_total", &class), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sick_node_and_an_unconfirmed_release_show() {
    let m = recorded();
    let mut nodes = RedisNodes::start(3);
    let a = Redlock::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(200))
        .build()
        .await
        .unwrap();
    nodes.servers[0].kill();

    // The quorum needs both healthy nodes: they granted, the dead one did not (failed, or
    // undecided when the quorum came first).
    let guard = a.lock_with("m3:a", &once()).await.unwrap();
    assert_eq!(votes(&a, "acquired"), vec![0, 1, 1]);
    assert_eq!(
        sum(&votes(&a, "failed"), &votes(&a, "undecided")),
        vec![1, 0, 0]
    );

    nodes.servers[1].kill();
    let error = within("the release", guard.release()).await.unwrap_err();
    assert!(
        matches!(error, LockError::ReleaseUnconfirmed { .. }),
        "{error}"
    );
    let class = [("resource_class", "m3")];
    assert_eq!(m.counter("redlock_release_unconfirmed_total", &class), 1);
    assert_eq!(m.gauge("redlock_held", &class), 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_woken_by_a_release_is_counted_by_message() {
    let m = recorded();
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let guard = a.lock("m4:job").await.unwrap();
    // The retry delay is far longer than the hold: only the release's message wakes B.
    let patient = LockOptions::default()
        .retry_count(3)
        .retry_delay(Duration::from_secs(20));
    let waiter = tokio::spawn(async move { b.lock_with("m4:job", &patient).await });
    // Released once B is queued, so that it is the release's message that wakes it.
    let key = a.key_for("m4:job");
    within("the waiter to queue", async {
        while nodes.queued(&key).await.iter().all(|&n| n == 0) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    guard.release().await.unwrap();
    let got = within("the woken waiter", waiter).await.unwrap().unwrap();
    let by_message = [("resource_class", "m4"), ("by", "message")];
    let by_timer = [("resource_class", "m4"), ("by", "timer")];
    assert_eq!(m.counter("redlock_wakeups_total", &by_message), 1);
    assert_eq!(m.counter("redlock_wakeups_total", &by_timer), 0);
    got.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_acquisition_is_measured_as_cancelled() {
    let m = recorded();
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let guard = a.lock("m5:job").await.unwrap();
    let patient = LockOptions::default().wait_timeout(Duration::from_secs(30));
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), b.lock_with("m5:job", &patient)).await;
    assert!(gave_up.is_err());
    let cancelled = [("resource_class", "m5"), ("outcome", "cancelled")];
    assert_eq!(
        m.samples("redlock_acquire_duration_seconds", &cancelled)
            .len(),
        1
    );
    guard.release().await.unwrap();
}

/// A job whose resource starts with client data: the macro labels it by its template.
#[redlock_core::redlock(resource = "{tenant}:m6job", redlock = redlock, retry_count = 0)]
async fn tenant_job(redlock: &Redlock, tenant: &str) -> Result<f64, LockError> {
    Ok(recorded().gauge("redlock_held", &[("resource_class", "{tenant}:m6job")]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classes_come_from_the_code_never_from_client_data() {
    let m = recorded();
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    // Held under the template's class while the body runs.
    assert_eq!(tenant_job(&a, "acme").await.unwrap(), 1.0);
    assert!(
        m.find("redlock_held", &[("resource_class", "acme")])
            .is_empty()
    );
    // A class given in the options wins over the resource's prefix.
    let named = once().resource_class("m6named");
    let guard = a.lock_with("m6x:1", &named).await.unwrap();
    assert_eq!(
        m.gauge("redlock_held", &[("resource_class", "m6named")]),
        1.0
    );
    assert!(
        m.find("redlock_held", &[("resource_class", "m6x")])
            .is_empty()
    );
    guard.release().await.unwrap();
}

/// A detached lock leaves the held gauge of the process that detached it (without a lost
/// count: it is still held, elsewhere) and joins the resuming one's; a force-release counts
/// every call, whatever it found.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detach_resume_and_force_release_are_counted() {
    let m = recorded();
    let nodes = RedisNodes::start(3);
    let (a, b) = (redlock(&nodes).await, redlock(&nodes).await);
    let class = [("resource_class", "m5")];
    let guard = a.lock_with("m5:job:1", &once()).await.unwrap();
    assert_eq!(m.gauge("redlock_held", &class), 1.0);
    let detached = guard.detach().unwrap();
    assert_eq!(m.gauge("redlock_held", &class), 0.0);
    assert_eq!(m.counter("redlock_lost_total", &class), 0);
    let resumed = b.resume(&detached).await.unwrap();
    assert_eq!(m.gauge("redlock_held", &class), 1.0);
    assert_eq!(m.counter("redlock_force_releases_total", &class), 0);
    a.force_release("m5:job:1").await.unwrap();
    a.force_release("m5:job:1").await.unwrap();
    assert_eq!(m.counter("redlock_force_releases_total", &class), 2);
    drop(resumed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_permit_is_measured_with_the_mode_label_permit() {
    let m = recorded();
    let nodes = RedisNodes::start(3);
    let a = redlock(&nodes).await;
    let permit = [("resource_class", "m7"), ("mode", "permit")];
    let guard = a
        .semaphore("m7:export", 2)
        .acquire_with(&once())
        .await
        .unwrap();
    assert_eq!(m.gauge("redlock_held", &[("resource_class", "m7")]), 1.0);
    let acquired = [permit[0], permit[1], ("outcome", "acquired")];
    assert_eq!(
        m.samples("redlock_acquire_duration_seconds", &acquired)
            .len(),
        1
    );
    assert_eq!(m.samples("redlock_acquire_attempts", &permit), vec![1.0]);
    guard.release().await.unwrap();
    assert_eq!(m.samples("redlock_hold_duration_seconds", &permit).len(), 1);
    let plain = [("resource_class", "m7"), ("mode", "plain")];
    assert!(m.find("redlock_acquire_attempts", &plain).is_empty());
}
