//! Oracles independent of the lock (reliability.md §7): an interval checker over the holders'
//! own records (O1), a read-modify-write register on a separate store that loses updates when
//! two holders overlap (O2), and a fenced write that refuses stale fencing tokens (O3).

mod fenced;

pub use fenced::{Fenced, Register};

use std::sync::{Mutex, PoisonError};
use tokio::time::Instant;

use redlock_core::Mode;

/// One holder's critical section as the harness saw it, on the harness's monotonic clock:
/// from the moment the lock call returned to the release or the end of validity, whichever
/// came first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hold {
    /// Which client held it.
    pub holder: usize,
    /// When the lock call returned.
    pub start: Instant,
    /// `min(released, valid_until)`.
    pub end: Instant,
    /// The lock mode it was held in; `None` for the plain exclusive lock.
    pub mode: Option<Mode>,
}

impl Hold {
    /// `true` when `self` and `other` may overlap: both held in compatible modes.
    fn may_share(&self, other: &Hold) -> bool {
        matches!((self.mode, other.mode), (Some(a), Some(b)) if a.compatible(b))
    }
}

/// O1: every hold of one resource, checked for overlaps.
#[derive(Debug, Default)]
pub struct History {
    holds: Mutex<Vec<Hold>>,
}

impl History {
    /// An empty history.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a hold: acquired at `start`, valid until `valid_until`, released at `released`.
    pub fn record(&self, holder: usize, start: Instant, valid_until: Instant, released: Instant) {
        self.record_mode(holder, None, start, valid_until, released);
    }

    /// Records a hold in a lock mode (`None`: the plain exclusive lock).
    pub fn record_mode(
        &self,
        holder: usize,
        mode: Option<Mode>,
        start: Instant,
        valid_until: Instant,
        released: Instant,
    ) {
        let hold = Hold {
            holder,
            start,
            end: released.min(valid_until),
            mode,
        };
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hold);
    }

    /// How many holds were recorded.
    pub fn len(&self) -> usize {
        self.holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// `true` if nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every hold, sorted by start.
    pub fn holds(&self) -> Vec<Hold> {
        let mut holds = self
            .holds
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        holds.sort_by_key(|h| h.start);
        holds
    }

    /// Pairs of holds that overlap: each hold that started before an earlier one had ended
    /// is reported with the hold it overlaps.
    pub fn overlaps(&self) -> Vec<(Hold, Hold)> {
        let mut found = Vec::new();
        let mut longest: Option<Hold> = None;
        for hold in self.holds() {
            if let Some(previous) = longest
                && hold.start < previous.end
            {
                found.push((previous, hold));
            }
            if longest.is_none_or(|p| hold.end > p.end) {
                longest = Some(hold);
            }
        }
        found
    }
}

impl History {
    /// The most holds at one instant, with the holds at the first instant it was reached:
    /// the oracle of a counting semaphore, whose holds may overlap up to its permits and
    /// no further. A hold that ends when another starts does not overlap it.
    pub fn max_overlap(&self) -> (usize, Vec<Hold>) {
        let holds = self.holds();
        // Starts (+1) and ends (-1) by time, an end before a start at the same instant.
        let mut events: Vec<(Instant, i8, usize)> = Vec::with_capacity(holds.len() * 2);
        for (i, hold) in holds.iter().enumerate() {
            if hold.start < hold.end {
                events.push((hold.start, 1, i));
                events.push((hold.end, -1, i));
            }
        }
        events.sort_by_key(|&(at, delta, _)| (at, delta));
        let (mut open, mut peak, mut at_peak): (Vec<usize>, usize, Vec<Hold>) =
            (Vec::new(), 0, Vec::new());
        for (_, delta, i) in events {
            if delta > 0 {
                open.push(i);
                if open.len() > peak {
                    peak = open.len();
                    at_peak = open.iter().map(|&j| holds[j]).collect();
                }
            } else {
                open.retain(|&j| j != i);
            }
        }
        (peak, at_peak)
    }

    /// Pairs of overlapping holds, split by whether their modes allow it: `(conflicts,
    /// shared)`. A conflict is two holds in incompatible modes (or a plain hold and any other)
    /// at once; shared pairs show that compatible holders really did hold together.
    pub fn mode_overlaps(&self) -> (Vec<(Hold, Hold)>, usize) {
        let holds = self.holds();
        let (mut conflicts, mut shared) = (Vec::new(), 0);
        for (i, a) in holds.iter().enumerate() {
            for b in holds[i + 1..].iter().take_while(|b| b.start < a.end) {
                if a.may_share(b) {
                    shared += 1;
                } else {
                    conflicts.push((*a, *b));
                }
            }
        }
        (conflicts, shared)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A hold by `holder` from `start` to `end` ms after `t0`.
    fn hold(t0: Instant, holder: usize, mode: Option<Mode>, start: u64, end: u64) -> History {
        let history = History::new();
        add(&history, t0, holder, mode, start, end);
        history
    }

    fn add(
        history: &History,
        t0: Instant,
        holder: usize,
        mode: Option<Mode>,
        start: u64,
        end: u64,
    ) {
        let at = |ms| t0 + Duration::from_millis(ms);
        // Released at `end`, valid until later: the hold ends at the release.
        history.record_mode(holder, mode, at(start), at(end + 1_000), at(end));
    }

    #[test]
    fn the_semaphore_oracle_counts_holds_at_once_and_rejects_four_of_three() {
        let t0 = Instant::now();
        // Three at once at most: a chain of holds where each ends as the fourth starts.
        let history = hold(t0, 0, None, 0, 30);
        add(&history, t0, 1, None, 10, 40);
        add(&history, t0, 2, None, 20, 50);
        add(&history, t0, 3, None, 30, 60);
        let (peak, _) = history.max_overlap();
        assert_eq!(peak, 3);
        // Four overlapping intervals with three permits: the oracle must reject them.
        add(&history, t0, 4, None, 25, 26);
        let (peak, at_peak) = history.max_overlap();
        assert!(peak > 3, "four overlapping holds passed as {peak}");
        let mut holders: Vec<usize> = at_peak.iter().map(|h| h.holder).collect();
        holders.sort_unstable();
        assert_eq!(holders, [0, 1, 2, 4]);
        assert_eq!(History::new().max_overlap().0, 0);
    }

    #[test]
    fn disjoint_and_touching_holds_do_not_overlap() {
        let t0 = Instant::now();
        let history = hold(t0, 0, None, 0, 10);
        add(&history, t0, 1, None, 10, 20);
        add(&history, t0, 2, None, 30, 40);
        assert!(history.overlaps().is_empty());
        assert!(history.mode_overlaps().0.is_empty());
    }

    #[test]
    fn overlapping_holds_are_flagged_even_behind_a_short_one() {
        let t0 = Instant::now();
        // A long hold, a short one inside it, and a third that starts after the short one
        // ended but while the long one still runs: both later holds overlap the long one.
        let history = hold(t0, 0, None, 0, 100);
        add(&history, t0, 1, None, 10, 20);
        add(&history, t0, 2, None, 50, 60);
        let pairs: Vec<(usize, usize)> = history
            .overlaps()
            .iter()
            .map(|(a, b)| (a.holder, b.holder))
            .collect();
        assert_eq!(pairs, [(0, 1), (0, 2)]);
        assert_eq!(history.mode_overlaps().0.len(), 2);
    }

    #[test]
    fn the_end_of_a_hold_is_its_validity_when_that_comes_first() {
        let t0 = Instant::now();
        let at = |ms| t0 + Duration::from_millis(ms);
        let history = History::new();
        // Valid until 10, released (too late) at 50: a hold from 20 does not overlap it.
        history.record(0, at(0), at(10), at(50));
        history.record(1, at(20), at(30), at(30));
        assert!(history.overlaps().is_empty());
        // Valid until 50, released at 50: it does.
        history.record(2, at(40), at(60), at(60));
        history.record(3, at(45), at(70), at(70));
        assert_eq!(history.overlaps().len(), 1);
    }

    #[test]
    fn modes_share_only_where_the_table_allows() {
        let t0 = Instant::now();
        let (pr, ex, cr, cw) = (
            Some(Mode::ProtectedRead),
            Some(Mode::Exclusive),
            Some(Mode::ConcurrentRead),
            Some(Mode::ConcurrentWrite),
        );
        // Readers together: shared, no conflict.
        let readers = hold(t0, 0, pr, 0, 100);
        add(&readers, t0, 1, pr, 10, 50);
        add(&readers, t0, 2, cr, 20, 30);
        assert_eq!(readers.mode_overlaps(), (Vec::new(), 3));
        // A writer beside a reader, a plain lock beside a mode holder, PR beside CW: each is a
        // conflict the checker must report (the negative controls).
        for (a, b) in [
            (pr, ex),
            (None, pr),
            (pr, None),
            (None, None),
            (pr, cw),
            (ex, ex),
        ] {
            let history = hold(t0, 0, a, 0, 100);
            add(&history, t0, 1, b, 50, 150);
            let (conflicts, shared) = history.mode_overlaps();
            assert_eq!((conflicts.len(), shared), (1, 0), "{a:?} beside {b:?}");
        }
        // NL shares with everything, EX included.
        let null = hold(t0, 0, ex, 0, 100);
        add(&null, t0, 1, Some(Mode::Null), 50, 150);
        assert_eq!(null.mode_overlaps(), (Vec::new(), 1));
    }
}
