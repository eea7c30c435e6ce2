//! The demo: real Redis nodes, three replicas of the shop, concurrent load, a SIGTERM.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use fred::interfaces::KeysInterface;
use redlock_tests::{RedisNodes, RedisServer, free_port, plain_client};
use reqwest::Method;

const ORDERS: u64 = 20;
const PAY_PER_ORDER: usize = 8;
const SKUS: [&str; 3] = ["apple", "pear", "plum"];
const STOCK: i64 = 30;
const BUY_PER_SKU: usize = 40;
const READS: usize = 90;
const WRITES: usize = 15;
const LOCK_TTL_MS: u64 = 1_000;
const GRACE_MS: u64 = 300;
/// What replica-1 logs when SIGTERM cuts its long job: the story's own warnings.
const EXPECTED_ON_SIGTERM: [&str; 2] = [
    "grace period over with requests in flight",
    "lock lost while the request was in flight",
];

struct Replica {
    name: String,
    base: String,
    child: Child,
    /// What the replica logged (its stderr), one entry a line, kept for the report.
    log: Arc<Mutex<Vec<String>>>,
    /// The thread reading its stderr; it ends when the replica exits.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Replica {
    /// Takes the lines logged so far.
    fn take_log(&self) -> Vec<String> {
        self.log
            .lock()
            .map(|mut lines| std::mem::take(&mut *lines))
            .unwrap_or_default()
    }

    /// Takes every line the replica logged, once it has exited.
    fn take_final_log(&mut self) -> Vec<String> {
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.take_log()
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // Whatever the report did not show (the demo failed before it): shown here, so that a
        // replica's own error is never lost.
        for line in self.take_final_log() {
            eprintln!("[{}] {line}", self.name);
        }
    }
}

#[derive(Default)]
struct Tally {
    latencies: Vec<Duration>,
    by_status: BTreeMap<u16, usize>,
}

impl Tally {
    fn record(&mut self, status: u16, latency: Duration) {
        self.latencies.push(latency);
        *self.by_status.entry(status).or_default() += 1;
    }

    fn count(&self, pred: impl Fn(u16) -> bool) -> usize {
        self.by_status
            .iter()
            .filter(|(s, _)| pred(**s))
            .map(|(_, n)| n)
            .sum()
    }

    fn percentile(&mut self, p: f64) -> Duration {
        self.latencies.sort_unstable();
        let i = ((self.latencies.len() as f64 - 1.0) * p).round() as usize;
        self.latencies.get(i).copied().unwrap_or_default()
    }
}

fn main() -> std::process::ExitCode {
    let result = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(anyhow::Error::from)
        .and_then(|runtime| runtime.block_on(demo()));
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("demo: {error:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The shop binary, built beside this one (`cargo xtask demo` builds both).
fn shop_binary() -> anyhow::Result<std::path::PathBuf> {
    let me = std::env::current_exe().context("where is the demo binary?")?;
    let shop = me.with_file_name("shop");
    if !shop.is_file() {
        bail!(
            "{} not found: build it first (`cargo xtask demo` does)",
            shop.display()
        );
    }
    Ok(shop)
}

async fn demo() -> anyhow::Result<()> {
    // Lock nodes: REDLOCK_NODES if given, else 5 local servers.
    println!("starting the lock nodes, a data store and 3 replicas of the shop...");
    let (_local, nodes) = match std::env::var("REDLOCK_NODES") {
        Ok(nodes) if !nodes.trim().is_empty() => {
            // Never printed: the URLs may carry passwords.
            println!("lock nodes: from REDLOCK_NODES");
            (None, nodes)
        }
        _ => {
            let local = RedisNodes::start(5);
            let urls = local.urls().join(",");
            println!("lock nodes: {urls}");
            (Some(local), urls)
        }
    };
    let data = RedisServer::start();
    println!("data store: {}", data.url());
    seed(&data.url()).await?;

    let binary = shop_binary()?;
    let mut replicas = Vec::new();
    for i in 1..=3 {
        replicas.push(start_replica(&binary, i, &nodes, &data.url())?);
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(90))
        .build()?;
    for replica in &mut replicas {
        wait_healthy(&http, replica).await?;
    }
    println!(
        "replicas: {}",
        replicas
            .iter()
            .map(|r| r.base.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );

    // 1. Concurrent load through the locked routes, spread over the replicas.
    let bases: Vec<String> = replicas.iter().map(|r| r.base.clone()).collect();
    let mut requests = Vec::new();
    for order in 1..=ORDERS {
        for k in 0..PAY_PER_ORDER {
            requests.push(post(format!(
                "{}/orders/{order}/pay",
                bases[(order as usize + k) % 3]
            )));
        }
    }
    for (s, sku) in SKUS.iter().enumerate() {
        for k in 0..BUY_PER_SKU {
            requests.push(post(format!("{}/stock/{sku}/buy", bases[(s + k) % 3])));
        }
    }
    requests.extend(catalog_load(&bases, "catalog/a"));
    println!(
        "sending {} requests at once (at most 64 in flight), then the same load without the lock...",
        requests.len()
    );
    let started = Instant::now();
    let mut tally = fire(&http, requests).await;
    let wall = started.elapsed();

    // Baseline: the same payment handler without the lock.
    let mut unsafe_requests = Vec::new();
    for order in 101..=100 + ORDERS {
        for k in 0..PAY_PER_ORDER {
            unsafe_requests.push(post(format!(
                "{}/unsafe/orders/{order}/pay",
                bases[(order as usize + k) % 3]
            )));
        }
    }
    unsafe_requests.extend(catalog_load(&bases, "unsafe/catalog/b"));
    let _ = fire(&http, unsafe_requests).await;

    let store = plain_client(&data.url()).await;
    let mut broken = Vec::new();
    let mut paid = 0;
    for order in 1..=ORDERS {
        let charges: Option<u64> = store.get(format!("order:{order}:charges")).await?;
        match charges {
            Some(1) => paid += 1,
            other => broken.push(format!(
                "order {order} charged {} times",
                other.unwrap_or(0)
            )),
        }
    }
    let mut fences = Vec::new();
    for order in 1..=ORDERS {
        if let Some(fence) = store
            .get::<Option<u64>, _>(format!("order:{order}:fence"))
            .await?
        {
            fences.push(fence);
        }
    }
    if fences.len() as u64 != ORDERS {
        broken.push(format!(
            "{} of {ORDERS} charges carry a fencing token",
            fences.len()
        ));
    }
    let mut double_charged_unlocked = 0;
    for order in 101..=100 + ORDERS {
        let charges: Option<u64> = store.get(format!("order:{order}:charges")).await?;
        if charges.unwrap_or(0) > 1 {
            double_charged_unlocked += 1;
        }
    }
    let shelf = |shelf: &str, field: &str| format!("shelf:{shelf}:{field}");
    let number = |key: String| {
        let store = store.clone();
        async move {
            store
                .get::<Option<i64>, _>(key)
                .await
                .map(Option::unwrap_or_default)
        }
    };
    let torn = number(shelf("a", "torn")).await?;
    let most_readers = number(shelf("a", "most_readers")).await?;
    let writes = number(shelf("a", "price_version")).await?;
    let torn_unlocked = number(shelf("b", "torn")).await?;
    if torn != 0 {
        broken.push(format!(
            "{torn} torn reads or writes under readers on the read/write route"
        ));
    }
    if writes != WRITES as i64 {
        broken.push(format!("{writes} of {WRITES} shelf writes went through"));
    }
    let mut sold_total = 0;
    for sku in SKUS {
        let left: i64 = store
            .get::<Option<i64>, _>(format!("stock:{sku}"))
            .await?
            .unwrap_or(0);
        let sold: i64 = store
            .get::<Option<i64>, _>(format!("sold:{sku}"))
            .await?
            .unwrap_or(0);
        sold_total += sold;
        if left < 0 || left + sold != STOCK {
            broken.push(format!("{sku}: {sold} sold but {left} left of {STOCK}"));
        }
    }

    println!();
    println!(
        "load: {} requests in {:.2?} over 3 replicas",
        tally.latencies.len(),
        wall
    );
    println!(
        "  2xx {}  409 sold-out {}  423 busy {}  503 {}  other {}",
        tally.count(|s| (200..300).contains(&s)),
        tally.count(|s| s == 409),
        tally.count(|s| s == 423),
        tally.count(|s| s == 503),
        tally.count(|s| !(200..300).contains(&s) && ![409, 423, 503].contains(&s)),
    );
    println!(
        "  latency p50 {:.1?}  p99 {:.1?}  max {:.1?}",
        tally.percentile(0.50),
        tally.percentile(0.99),
        tally.percentile(1.0)
    );
    println!("  orders paid exactly once: {paid}/{ORDERS} (locked route)");
    println!(
        "  fencing: every holder's writes carried its token; successive holders per order got 1, 2, ... up to {}..{}",
        fences.iter().min().unwrap_or(&0),
        fences.iter().max().unwrap_or(&0)
    );
    println!(
        "  baseline without the lock: {double_charged_unlocked}/{ORDERS} orders charged more than once"
    );
    println!(
        "  stock sold: {sold_total} of {} units, none oversold",
        STOCK * SKUS.len() as i64
    );
    println!(
        "  read/write route: {READS} reads and {writes} writes of one shelf, up to {most_readers} readers inside at once, {torn} torn reads"
    );
    println!("  baseline without the lock: {torn_unlocked} torn reads or writes under readers");
    if print_metrics(&http, &replicas).await? == 0.0 {
        broken.push("the replicas' /metrics show no acquisition".into());
    }

    // 2. SIGTERM while holding a lock: the next replica gets it within milliseconds.
    println!();
    println!(
        "replica-1 runs a 60 s job under an auto-extended lock, replica-2 asks for the same job, and after 3 s replica-1 gets SIGTERM..."
    );
    let handover = sigterm_handover(&http, &mut replicas, &nodes).await?;
    println!();
    println!(
        "auto-extension: {} held job:rebuild-search (ttl {LOCK_TTL_MS} ms) for {:.1?} while {} waited",
        handover.holder, handover.held_before_signal, handover.waiter,
    );
    println!(
        "SIGTERM hand-over: {} got it {:.0?} after SIGTERM, {:.0?} after {} exited (grace {GRACE_MS} ms)",
        handover.waiter, handover.after_signal, handover.after_exit, handover.holder
    );
    println!(
        "  {} released its lock before exiting: its token was left on {} of {} nodes, and the key went to the waiter (only our replicas are connected, so no window for foreign clients opened first)",
        handover.holder, handover.token_left_on, handover.nodes
    );
    if handover.token_left_on > handover.nodes / 2 {
        broken.push(format!(
            "{} exited with its lock still on {} of {} nodes: not released",
            handover.holder, handover.token_left_on, handover.nodes
        ));
    }
    // Replica-1's way out, in words; its log lines beside them, and any others as they are.
    let (expected, unexpected): (Vec<String>, Vec<String>) = replicas[0]
        .take_final_log()
        .into_iter()
        .partition(|line| EXPECTED_ON_SIGTERM.iter().any(|known| line.contains(known)));
    if !expected.is_empty() {
        println!(
            "  as expected, {} logged that its {GRACE_MS} ms grace ran out with the 60 s job still in flight, so it released the lock and dropped that request:",
            handover.holder
        );
        expected.iter().for_each(|line| println!("    {line}"));
    }
    let mut others = unexpected
        .into_iter()
        .map(|line| format!("[{}] {line}", handover.holder))
        .collect::<Vec<_>>();
    for replica in &replicas[1..] {
        others.extend(
            replica
                .take_log()
                .into_iter()
                .map(|line| format!("[{}] {line}", replica.name)),
        );
    }
    if !others.is_empty() {
        println!("  other log lines from the replicas:");
        others.iter().for_each(|line| println!("    {line}"));
    }

    println!();
    if broken.is_empty() {
        println!(
            "INVARIANT OK: every order paid exactly once, no stock oversold, no torn shelf read, lock handed over on SIGTERM"
        );
        Ok(())
    } else {
        for line in &broken {
            println!("INVARIANT BROKEN: {line}");
        }
        bail!("{} invariant violation(s)", broken.len())
    }
}

/// One sample of a Prometheus text scrape: its name, its labels as written, its value.
type Sample = (String, String, f64);

/// Reads the `redlock_*` samples of a Prometheus text scrape (comments, and the quantiles of
/// summaries, left out).
fn parse_scrape(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| line.starts_with("redlock_") && !line.contains("quantile="))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let value: f64 = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            Some((name.to_owned(), labels.to_owned(), value))
        })
        .collect()
}

/// Scrapes GET /metrics on every replica and prints the lock's metrics, summed over them:
/// acquisitions by class and outcome with their mean wait, then every counter and gauge.
/// Returns how many acquisitions they counted.
async fn print_metrics(http: &reqwest::Client, replicas: &[Replica]) -> anyhow::Result<f64> {
    let mut summed: BTreeMap<(String, String), f64> = BTreeMap::new();
    for replica in replicas {
        let url = format!("{}/metrics", replica.base);
        let text = http
            .get(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("scraping {url}"))?
            .text()
            .await?;
        for (name, labels, value) in parse_scrape(&text) {
            *summed.entry((name, labels)).or_default() += value;
        }
    }
    println!();
    println!(
        "metrics: GET /metrics on the 3 replicas (Prometheus text, redlock-core and redlock-axum's `metrics` feature), summed:"
    );
    let mut acquisitions = 0.0;
    let count = "redlock_acquire_duration_seconds_count";
    for ((_, labels), n) in summed.iter().filter(|((name, _), _)| name == count) {
        let sum = summed
            .get(&(
                "redlock_acquire_duration_seconds_sum".to_owned(),
                labels.clone(),
            ))
            .copied()
            .unwrap_or(0.0);
        let mean = Duration::from_secs_f64(if *n > 0.0 { sum / n } else { 0.0 });
        println!("  acquisitions {{{labels}}}: {n} (mean wait {mean:.1?})");
        acquisitions += n;
    }
    for ((name, labels), value) in &summed {
        if name.ends_with("_sum") || name.ends_with("_count") {
            continue;
        }
        println!("  {name}{{{labels}}} {value}");
    }
    Ok(acquisitions)
}

async fn seed(url: &str) -> anyhow::Result<()> {
    let store = plain_client(url).await;
    for sku in SKUS {
        let _: () = store
            .set(format!("stock:{sku}"), STOCK, None, None, false)
            .await?;
    }
    Ok(())
}

fn start_replica(
    binary: &std::path::Path,
    i: usize,
    nodes: &str,
    data: &str,
) -> anyhow::Result<Replica> {
    let port = free_port();
    let name = format!("replica-{i}");
    let mut child = Command::new(binary)
        .env("REDLOCK_NODES", nodes)
        .env("SHOP_DATA_URL", data)
        .env("PORT", port.to_string())
        .env("REPLICA", &name)
        .env("SHUTDOWN_GRACE_MS", GRACE_MS.to_string())
        .env(
            "RUST_LOG",
            std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("could not start {}", binary.display()))?;
    // Its log is collected, not interleaved with the results, and shown where it belongs.
    let log = Arc::new(Mutex::new(Vec::new()));
    let reader = child.stderr.take().map(|stderr| {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stderr)
                .lines()
                .map_while(Result::ok)
            {
                if let Ok(mut lines) = log.lock() {
                    lines.push(line);
                }
            }
        })
    });
    Ok(Replica {
        name,
        base: format!("http://127.0.0.1:{port}"),
        child,
        log,
        reader,
    })
}

async fn wait_healthy(http: &reqwest::Client, replica: &mut Replica) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Some(status) = replica.child.try_wait()? {
            let log = replica.take_final_log().join(" | ");
            bail!("{} exited at start-up ({status}): {log}", replica.name);
        }
        if let Ok(response) = http.get(format!("{}/health", replica.base)).send().await
            && response.status().is_success()
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("{} did not become healthy within 20 s", replica.name)
}

/// A `POST` to `url`.
fn post(url: String) -> (Method, String) {
    (Method::POST, url)
}

/// Reads of one shelf with a write every few reads, spread over the replicas: `GET` and `PUT
/// {base}/{path}`.
fn catalog_load(bases: &[String], path: &str) -> Vec<(Method, String)> {
    let every = READS / WRITES;
    (0..READS + WRITES)
        .map(|i| {
            let url = format!("{}/{path}", bases[i % bases.len()]);
            let method = if i % (every + 1) == every {
                Method::PUT
            } else {
                Method::GET
            };
            (method, url)
        })
        .collect()
}

/// Sends every request at once (bounded to 64 in flight), recording status and latency.
async fn fire(http: &reqwest::Client, requests: Vec<(Method, String)>) -> Tally {
    let limit = Arc::new(tokio::sync::Semaphore::new(64));
    let mut tasks = Vec::new();
    for (method, url) in requests {
        let (http, limit) = (http.clone(), limit.clone());
        tasks.push(tokio::spawn(async move {
            let _permit = limit.acquire_owned().await;
            let started = Instant::now();
            let status = match http.request(method, url).send().await {
                Ok(response) => {
                    let status = response.status().as_u16();
                    let _ = response.bytes().await;
                    status
                }
                Err(_) => 0,
            };
            (status, started.elapsed())
        }));
    }
    let mut tally = Tally::default();
    for task in tasks {
        if let Ok((status, latency)) = task.await {
            tally.record(status, latency);
        }
    }
    tally
}

struct Handover {
    holder: String,
    waiter: String,
    held_before_signal: Duration,
    after_signal: Duration,
    after_exit: Duration,
    /// Nodes still holding replica-1's token once it had exited (a majority: not released).
    token_left_on: usize,
    nodes: usize,
}

/// One client per lock node, for reading the lock keys.
async fn observers(nodes: &str) -> Vec<fred::clients::Client> {
    let mut clients = Vec::new();
    for url in nodes.split(',') {
        clients.push(plain_client(url.trim()).await);
    }
    clients
}

/// The value of `key` on every lock node, in order.
async fn values_on(clients: &[fred::clients::Client], key: &str) -> Vec<Option<String>> {
    let mut values = Vec::new();
    for client in clients {
        values.push(client.get::<Option<String>, _>(key).await.unwrap_or(None));
    }
    values
}

/// Waits until `key` exists on a majority of the lock nodes.
async fn until_held(clients: &[fred::clients::Client], key: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let mut holding = 0;
        for client in clients {
            if client.exists::<u32, _>(key).await.unwrap_or(0) == 1 {
                holding += 1;
            }
        }
        if holding > clients.len() / 2 {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    bail!("{key} was never held by a majority")
}

async fn sigterm_handover(
    http: &reqwest::Client,
    replicas: &mut [Replica],
    nodes: &str,
) -> anyhow::Result<Handover> {
    let url = |r: &Replica, ms: u64| format!("{}/jobs/rebuild-search/rebuild?ms={ms}", r.base);
    // Replica 1 starts a long rebuild and holds the lock.
    let observers = Arc::new(observers(nodes).await);
    let long = tokio::spawn(http.post(url(&replicas[0], 60_000)).send());
    until_held(&observers, "lock:job:rebuild-search").await?;
    // Replica 2 asks for the same job and waits for the lock.
    let waiter = tokio::spawn({
        let request = http.post(url(&replicas[1], 10)).send();
        async move {
            let response = request.await;
            (Instant::now(), response)
        }
    });
    // Replica 1 keeps the lock for 3 ttls (auto-extension) while replica 2 waits.
    let held_since = Instant::now();
    tokio::time::sleep(Duration::from_millis(3 * LOCK_TTL_MS)).await;
    if waiter.is_finished() {
        bail!("replica-2 got the lock while replica-1 still held it: not extended");
    }
    let held_before_signal = held_since.elapsed();
    // Replica-1's token on each node, to tell after it exited a release from an expiry.
    let tokens = values_on(&observers, "lock:job:rebuild-search").await;
    let signalled = Instant::now();
    let pid = nix::unistd::Pid::from_raw(i32::try_from(replicas[0].child.id())?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
    let exited = tokio::task::spawn_blocking({
        let mut child = std::mem::replace(&mut replicas[0].child, Command::new("true").spawn()?);
        move || {
            let _ = child.wait();
            Instant::now()
        }
    });
    // As soon as it exited: on how many nodes is its token still there?
    let left = tokio::spawn({
        let observers = Arc::clone(&observers);
        async move {
            let exited = exited.await;
            let now = values_on(&observers, "lock:job:rebuild-search").await;
            let left = tokens
                .iter()
                .zip(&now)
                .filter(|(before, now)| before.is_some() && before == now)
                .count();
            (exited, left, now.len())
        }
    });
    let (acquired_at, response) = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .context("replica-2 never got the lock")??;
    let response = response?;
    if !response.status().is_success() {
        bail!("replica-2 answered {}", response.status());
    }
    let (exited, token_left_on, nodes) = tokio::time::timeout(Duration::from_secs(20), left)
        .await
        .context("replica-1 did not exit within 20 s of SIGTERM")??;
    let exited = exited?;
    long.abort();
    Ok(Handover {
        holder: replicas[0].name.clone(),
        waiter: replicas[1].name.clone(),
        held_before_signal,
        after_signal: acquired_at.duration_since(signalled),
        after_exit: acquired_at.saturating_duration_since(exited),
        token_left_on,
        nodes,
    })
}
