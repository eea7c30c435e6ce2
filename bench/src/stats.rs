//! Percentiles, resident memory, and the printed table of targets.

use std::time::Duration;

/// Sorted latencies.
pub(crate) struct Latencies(Vec<Duration>);

impl Latencies {
    pub(crate) fn new(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self(samples)
    }

    /// The `q`-quantile in microseconds (nearest rank).
    pub(crate) fn quantile_us(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return f64::NAN;
        }
        let rank = ((self.0.len() as f64) * q).ceil() as usize;
        let index = rank.clamp(1, self.0.len()) - 1;
        self.0[index].as_secs_f64() * 1e6
    }
}

/// The process's resident set size in KiB (`VmRSS` in `/proc/self/status`).
pub(crate) fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix("VmRSS:")
                    .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
            })
        })
        .unwrap_or(0)
}

/// One target of the issue, checked on figures of this run.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    pub(crate) wanted: String,
    pub(crate) measured: String,
    pub(crate) met: bool,
}

/// Collects targets and prints them at the end.
#[derive(Default)]
pub(crate) struct Targets(Vec<Target>);

impl Targets {
    /// `value` must be at most `limit`.
    pub(crate) fn at_most(&mut self, name: &'static str, value: f64, limit: f64, unit: &str) {
        self.0.push(Target {
            name,
            wanted: format!("≤ {limit}{unit}"),
            measured: format!("{value:.2}{unit}"),
            met: value <= limit,
        });
    }

    /// `value` must be at least `limit`.
    pub(crate) fn at_least(&mut self, name: &'static str, value: f64, limit: f64, unit: &str) {
        self.0.push(Target {
            name,
            wanted: format!("≥ {limit}{unit}"),
            measured: format!("{value:.2}{unit}"),
            met: value >= limit,
        });
    }

    pub(crate) fn print(&self) {
        println!("\nTargets (ratios measured in this run)");
        println!(
            "  {:<44} {:>10} {:>12}  met",
            "target", "wanted", "measured"
        );
        for t in &self.0 {
            println!(
                "  {:<44} {:>10} {:>12}  {}",
                t.name,
                t.wanted,
                t.measured,
                if t.met { "yes" } else { "NO" }
            );
        }
        let met = self.0.iter().filter(|t| t.met).count();
        println!("  {met}/{} targets met", self.0.len());
    }

    /// The safety targets missed (two holders at once in some workload): the run fails on
    /// them, whatever the speed targets say.
    pub(crate) fn violations(&self) -> Vec<&'static str> {
        self.0
            .iter()
            .filter(|t| !t.met && t.name.contains("violations"))
            .map(|t| t.name)
            .collect()
    }
}

/// This process's CPU time so far, user and system, in seconds (`/proc/self/stat`, in clock
/// ticks of 10 ms: enough over a run of a second or more).
pub(crate) fn process_cpu_secs() -> f64 {
    const TICKS_PER_SEC: f64 = 100.0;
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // Fields after the command name (which is in parentheses and may hold spaces):
            // utime and stime are the 12th and 13th.
            let rest = &stat[stat.rfind(')')? + 2..];
            let mut fields = rest.split(' ').skip(11);
            let user: f64 = fields.next()?.parse().ok()?;
            let system: f64 = fields.next()?.parse().ok()?;
            Some((user + system) / TICKS_PER_SEC)
        })
        .unwrap_or(f64::NAN)
}

/// A `redis-server`'s CPU time so far, user and system, in seconds (`INFO cpu`).
pub(crate) async fn server_cpu_secs(url: &str) -> anyhow::Result<f64> {
    use fred::interfaces::ClientLike;
    let client =
        fred::types::Builder::from_config(fred::types::config::Config::from_url(url)?).build()?;
    client.init().await?;
    let info: String = client.info(Some(fred::types::InfoKind::Cpu)).await?;
    let _ = client.quit().await;
    let field = |name: &str| {
        info.lines()
            .find_map(|line| line.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(field("used_cpu_user:") + field("used_cpu_sys:"))
}
