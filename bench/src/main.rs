//! `cargo xtask bench`: W1–W5, W6 (lock modes), W7 (many waiters per handle) and W8 (what each
//! primitive costs) against 5 local `redis-server` nodes.
//!
//! Every figure of redlock-core is printed beside the same workload run in the same process
//! against (a) the floor, the Redlock protocol hand-written on plain `fred` ([`floor`]), (b) the
//! same floor on `redis-rs` ([`floor_redis`]), and (c) the `rslock` crate; W6 against
//! redlock-core's own exclusive lock, W7 against its own 8-locker run, W8 against the plain
//! lock and the fred floor. Options: `--quick`
//! (short runs, for a smoke test), `--cycles N` (W5's lock cycles, default 1,000,000),
//! `--only W1,W3` (a subset), `--alone ours|floor|redis-floor|rslock` (one implementation, for
//! profiling), `--no-windows` / `--no-handover` (redlock-core with that feature off, to measure
//! its cost).

mod contender;
mod floor;
mod floor_redis;
mod primitives;
mod read_write;
mod stats;
mod workloads;

use std::time::Duration;

use redlock_test::TestNodes as RedisNodes;

/// How long and how much each workload runs.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// W1 iterations per implementation and N.
    pub(crate) w1_iterations: usize,
    /// W2, W3 and W4 duration per implementation.
    pub(crate) run_for: Duration,
    /// W5 lock cycles.
    pub(crate) w5_cycles: u64,
    /// The workloads to run.
    pub(crate) only: Vec<String>,
    /// Run one implementation alone (for profiling; ratios are then not printed).
    pub(crate) alone: Option<contender::Kind>,
    /// How redlock-core's handles are built.
    pub(crate) ours: contender::OursConfig,
}

impl Plan {
    fn from_args() -> anyhow::Result<Self> {
        let mut plan = Plan {
            w1_iterations: 3_000,
            run_for: Duration::from_secs(5),
            w5_cycles: 1_000_000,
            only: Vec::new(),
            alone: None,
            ours: contender::OursConfig {
                windows: true,
                handover: true,
            },
        };
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--no-windows" => plan.ours.windows = false,
                "--no-handover" => plan.ours.handover = false,
                "--quick" => {
                    plan.w1_iterations = 300;
                    plan.run_for = Duration::from_secs(1);
                    plan.w5_cycles = 20_000;
                }
                "--alone" => {
                    let name = args.next().unwrap_or_default();
                    plan.alone = Some(
                        contender::Kind::ALL
                            .into_iter()
                            .find(|k| k.flag() == name)
                            .ok_or_else(|| {
                                anyhow::anyhow!("--alone needs ours, floor, redis-floor or rslock")
                            })?,
                    );
                }
                "--cycles" => {
                    plan.w5_cycles = args
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("--cycles needs a number"))?
                        .parse()?;
                }
                "--only" => {
                    plan.only = args
                        .next()
                        .ok_or_else(|| anyhow::anyhow!("--only needs e.g. sequential,contended"))?
                        .split(',')
                        .map(workload_id)
                        .collect::<anyhow::Result<_>>()?;
                }
                other => anyhow::bail!(
                    "unknown argument `{other}` (--quick, --cycles N, --only sequential,distinct,..., --alone ours|floor|redis-floor|rslock, --no-windows, --no-handover)"
                ),
            }
        }
        Ok(plan)
    }

    /// The implementations to measure.
    pub(crate) fn kinds(&self) -> &'static [contender::Kind] {
        match self.alone {
            Some(kind) => &contender::Kind::ALL[kind as usize..=kind as usize],
            None => &contender::Kind::ALL,
        }
    }

    /// Whether `workload` (its id, `W1`…`W7`) is to run.
    pub(crate) fn runs(&self, workload: &str) -> bool {
        self.only.is_empty() || self.only.iter().any(|w| w == workload)
    }
}

fn main() -> anyhow::Result<()> {
    let plan = Plan::from_args()?;
    contender::configure(plan.ours);
    let nodes = RedisNodes::start(5);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!(
        "redlock bench: 5 local redis-server nodes, {} cores, tokio multi-thread runtime{}{}",
        std::thread::available_parallelism().map_or(0, usize::from),
        if plan.ours.windows {
            ""
        } else {
            "; redlock-core without windows for foreign clients"
        },
        if plan.ours.handover {
            ""
        } else {
            "; redlock-core without hand-over"
        }
    );
    runtime.block_on(workloads::run_all(&plan, &nodes.urls()))
}

/// The workloads by the names users give `--only`, and the ids the bench prints.
const WORKLOADS: [(&str, &str); 8] = [
    ("sequential", "W1"),
    ("distinct", "W2"),
    ("contended", "W3"),
    ("layer", "W4"),
    ("memory", "W5"),
    ("modes", "W6"),
    ("handles", "W7"),
    ("primitives", "W8"),
];

/// The id of the workload named `name` (or given by its id).
fn workload_id(name: &str) -> anyhow::Result<String> {
    let name = name.trim();
    WORKLOADS
        .iter()
        .find(|(named, id)| named.eq_ignore_ascii_case(name) || id.eq_ignore_ascii_case(name))
        .map(|(_, id)| (*id).to_owned())
        .ok_or_else(|| {
            let names: Vec<&str> = WORKLOADS.iter().map(|(named, _)| *named).collect();
            anyhow::anyhow!(
                "unknown workload `{name}`; the workloads: {}",
                names.join(", ")
            )
        })
}
