//! `cargo run -p cron [TICKS]`: two replicas schedule one report every 2 seconds with
//! tokio-cron-scheduler; at each tick one runs it and the other skips it. Lock nodes come from
//! `REDLOCK_NODES` (comma-separated URLs), else 3 local `redis-server`s are started (as the
//! demo does). Exits non-zero unless every tick's report ran exactly once.

use std::process::ExitCode;

use redlock_tests::RedisNodes;

/// The variable of the lock nodes' URLs, as the library reads it.
const NODES_ENV: &str = "REDLOCK_NODES";

/// Ticks to watch when no count is given.
const DEFAULT_TICKS: usize = 5;

#[tokio::main]
async fn main() -> ExitCode {
    match watch().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(error) => {
            eprintln!("cron: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn watch() -> anyhow::Result<bool> {
    let ticks = match std::env::args().nth(1) {
        Some(count) => count
            .parse()
            .map_err(|e| anyhow::anyhow!("TICKS must be a count of ticks, not {count:?}: {e}"))?,
        None => DEFAULT_TICKS,
    };
    let (_local, nodes) = match std::env::var(NODES_ENV) {
        Ok(urls) if !urls.trim().is_empty() => {
            // Never printed: the URLs may carry passwords.
            println!("lock nodes: from {NODES_ENV}");
            let urls = urls
                .split(',')
                .map(str::trim)
                .filter(|url| !url.is_empty())
                .map(str::to_owned)
                .collect();
            (None, urls)
        }
        _ => {
            let local = RedisNodes::start(3);
            let urls = local.urls();
            println!("lock nodes: {}", urls.join(", "));
            (Some(local), urls)
        }
    };
    println!(
        "{} schedule a report at \"{}\" (it takes {:?}); watching {ticks} ticks...",
        cron::REPLICAS.join(" and "),
        cron::SCHEDULE,
        cron::REPORT_TIME,
    );
    let runs = cron::run(&nodes, ticks).await?;
    let ok = runs.ran_once_per_tick();
    let ran: usize = runs
        .ticks
        .values()
        .flatten()
        .filter(|r| r.report.is_some())
        .count();
    println!(
        "{}: {} ticks, {ran} reports written, {} skipped, at most {} running at once",
        if ok {
            "INVARIANT OK (one report per tick)"
        } else {
            "INVARIANT BROKEN (a tick without exactly one report)"
        },
        runs.ticks.len(),
        runs.skipped(),
        runs.most_inside,
    );
    Ok(ok)
}
