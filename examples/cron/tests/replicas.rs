//! The example against real nodes: two ticks, one report each, the other replica skipping.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use redlock_tests::RedisNodes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_runs_the_report_at_each_tick_and_the_other_skips_it() {
    let nodes = RedisNodes::start(3);
    let runs = cron::run(&nodes.urls(), 2).await.unwrap();
    assert!(runs.ran_once_per_tick(), "{runs:?}");
    // Both replicas fired at two ticks: one ran, the other skipped, at each.
    assert!(runs.skipped() >= 2, "{runs:?}");
}
