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
}
