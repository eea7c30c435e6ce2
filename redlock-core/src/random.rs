//! Every draw the lock makes at random, and its reading of the wall clock, in one place:
//! tokens from the OS CSPRNG, waiter markers and delays from the thread's generator, the wall
//! clock from the system. With the `simulation` feature, a thread seeded by
//! [`simulation::seed`] takes all of them from the seed and tokio's clock instead, so that a
//! simulated run replays exactly.

use std::ops::RangeInclusive;
use std::time::Duration;

use rand::Rng;

/// Fills `bytes` for a token: from the OS CSPRNG, or from the seed on a seeded thread.
pub(crate) fn token_bytes(bytes: &mut [u8]) -> Result<(), getrandom::Error> {
    #[cfg(feature = "simulation")]
    if simulation::with(|seeded| rand::RngCore::fill_bytes(&mut seeded.rng, bytes)).is_some() {
        return Ok(());
    }
    getrandom::fill(bytes)
}

/// A random `u64`.
pub(crate) fn u64() -> u64 {
    #[cfg(feature = "simulation")]
    if let Some(value) = simulation::with(|seeded| seeded.rng.random()) {
        return value;
    }
    rand::rng().random()
}

/// A random value in `range` (both ends included).
pub(crate) fn in_range(range: RangeInclusive<u64>) -> u64 {
    #[cfg(feature = "simulation")]
    if let Some(value) = simulation::with(|seeded| seeded.rng.random_range(range.clone())) {
        return value;
    }
    rand::rng().random_range(range)
}

/// A random delay from zero to `most` (both included), to the nanosecond.
///
/// On a seeded thread, rounded up to whole ms: tokio's timer fires at millisecond ticks
/// counted from when its driver started, which a paused clock's readings are offset from by
/// a few ns that differ from run to run; a delay with a fraction of a ms could then fire a
/// tick apart in two runs of one seed. A whole ms fires at the same tick in both, as late as
/// the fraction would have at most.
pub(crate) fn delay_up_to(most: Duration) -> Duration {
    if most.is_zero() {
        return Duration::ZERO;
    }
    let nanos = in_range(0..=u64::try_from(most.as_nanos()).unwrap_or(u64::MAX));
    #[cfg(feature = "simulation")]
    if simulation::with(|_| ()).is_some() {
        return Duration::from_millis(nanos.div_ceil(1_000_000));
    }
    Duration::from_nanos(nanos)
}

/// The wall clock now, in ms since the Unix epoch (0 before it).
pub(crate) fn wall_clock_ms() -> i64 {
    #[cfg(feature = "simulation")]
    if let Some(ms) = simulation::with(|seeded| seeded.wall_clock_ms()) {
        return i64::try_from(ms).unwrap_or(i64::MAX);
    }
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Deterministic simulation: a thread whose every random draw and wall-clock reading by the
/// lock comes from a seed (requires the `simulation` feature).
///
/// A simulation runs the lock's own code on a current-thread tokio runtime with its clock
/// paused, over in-memory nodes (redlock-test's `MemoryNodes`). Seeded, the runtime's thread
/// draws tokens, waiter markers, retry jitter and the delays after a split vote or a split
/// fencing claim from the seed, and reads the wall clock as a fixed epoch plus tokio's clock:
/// the same seed makes the same run, message for message, and a failure found at a seed is
/// replayed from it.
///
/// Tokens drawn from a seed are predictable: seed only a thread that runs a test.
#[cfg(feature = "simulation")]
#[cfg_attr(docsrs, doc(cfg(feature = "simulation")))]
pub mod simulation {
    use std::cell::RefCell;
    use std::marker::PhantomData;

    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use tokio::time::Instant;

    /// What a seeded wall clock reads when the thread is seeded: 2027-01-15T08:00:00Z, in ms
    /// since the Unix epoch.
    pub const EPOCH_MS: u64 = 1_800_000_000_000;

    pub(super) struct Seeded {
        pub(super) rng: StdRng,
        start: Instant,
    }

    impl Seeded {
        pub(super) fn wall_clock_ms(&self) -> u64 {
            let since = Instant::now().saturating_duration_since(self.start);
            EPOCH_MS.saturating_add(u64::try_from(since.as_millis()).unwrap_or(u64::MAX))
        }
    }

    thread_local! {
        static SEEDED: RefCell<Option<Seeded>> = const { RefCell::new(None) };
        /// How many times this thread was seeded: a [`Seed`] dropped after a newer one
        /// replaced it leaves the newer one in place.
        static SEEDINGS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    pub(super) fn with<T>(draw: impl FnOnce(&mut Seeded) -> T) -> Option<T> {
        SEEDED.with(|seeded| seeded.borrow_mut().as_mut().map(draw))
    }

    /// Seeds this thread: from now until the returned [`Seed`] is dropped, the lock's draws on
    /// this thread come from `seed`, and its wall clock reads [`EPOCH_MS`] plus the time
    /// tokio's clock has moved since this call. Call it inside the runtime (`block_on`) whose
    /// clock the run uses. Seeding a thread again replaces the seed.
    pub fn seed(seed: u64) -> Seed {
        SEEDED.with(|seeded| {
            *seeded.borrow_mut() = Some(Seeded {
                rng: StdRng::seed_from_u64(seed),
                start: Instant::now(),
            });
        });
        let seeding = SEEDINGS.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        Seed {
            seeding,
            _thread: PhantomData,
        }
    }

    /// The wall clock the lock reads on this thread, in ms since the Unix epoch: the seeded
    /// clock on a seeded thread, the system's elsewhere. In-memory nodes read it too, so that
    /// their clocks and the lock's agree in a replayed run.
    pub fn wall_clock_ms() -> u64 {
        u64::try_from(super::wall_clock_ms()).unwrap_or(0)
    }

    /// A seeded thread ([`seed`]); dropping it returns the thread to the OS's randomness and
    /// the system clock, unless the thread was seeded again since (the newer seed stays).
    /// Not `Send`: it belongs to the thread it seeded.
    #[must_use = "the thread is seeded only while the Seed lives"]
    pub struct Seed {
        seeding: u64,
        _thread: PhantomData<*const ()>,
    }

    impl std::fmt::Debug for Seed {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Seed")
        }
    }

    impl Drop for Seed {
        fn drop(&mut self) {
            if SEEDINGS.with(std::cell::Cell::get) == self.seeding {
                SEEDED.with(|seeded| *seeded.borrow_mut() = None);
            }
        }
    }
}

#[cfg(all(test, feature = "simulation"))]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_seeded_thread_draws_the_same_values_and_reads_tokio_s_clock() {
        let draws = || {
            let _seed = simulation::seed(7);
            let mut bytes = [0u8; 20];
            token_bytes(&mut bytes).unwrap();
            (bytes, u64(), in_range(0..=1_000), wall_clock_ms())
        };
        let first = draws();
        assert_eq!(first, draws());
        assert_eq!(first.3, 1_800_000_000_000);
        {
            let _seed = simulation::seed(7);
            tokio::time::advance(Duration::from_millis(1_500)).await;
            assert_eq!(wall_clock_ms(), 1_800_000_001_500);
        }
        // A seed dropped after a newer one leaves the newer one in place.
        let older = simulation::seed(1);
        let newer = simulation::seed(2);
        drop(older);
        assert_eq!(wall_clock_ms(), 1_800_000_000_000);
        drop(newer);
        // Unseeded again: the system's clock and the OS's randomness.
        let system = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        assert!(i128::from(wall_clock_ms()).abs_diff(system as i128) < 1_000);
        assert_ne!(u64(), u64());
    }
}
