//! What an operator sees: the spans of acquisitions and releases, the event of a lost lock,
//! and, with the `metrics` feature, the metrics of the crate docs ("Metrics and tracing") through the
//! `metrics` facade.
//!
//! Span and field names follow OpenTelemetry's conventions: dotted, lower-case, namespaced
//! (`redlock.resource`, `redlock.outcome`, `error.type`). No token is ever recorded.
//! Metrics are labelled by a resource *class* (see [`resource_class`]), never by the full
//! resource, so that a client-controlled resource cannot grow a label set without bound.
//!
//! About 430 lines of code: the spans, the lost event and the metrics share the resource class
//! and the outcome labels, so that a span and a metric of one acquisition name it alike.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;
use tokio::time::Instant;

use crate::error::{LockError, LostReason};
use crate::mode::Mode;
use crate::options::LockOptions;
use crate::outcome::NodeVote;

#[cfg(feature = "metrics")]
use metrics::{counter, gauge, histogram};
#[cfg(not(feature = "metrics"))]
use off::{counter, gauge, histogram};

/// Without the `metrics` feature: the metric macros evaluate their labels and record nothing.
#[cfg(not(feature = "metrics"))]
mod off {
    pub(super) struct Off;

    impl Off {
        pub(super) fn increment<T>(&self, _value: T) {}
        pub(super) fn decrement<T>(&self, _value: T) {}
        pub(super) fn record<T>(&self, _value: T) {}
    }

    macro_rules! off {
        ($name:literal $(, $key:literal => $value:expr)* $(,)?) => {{
            $(let _ = $value;)*
            off::Off
        }};
    }
    pub(super) use {off as counter, off as gauge, off as histogram};
}

/// The most resource classes labelled by name; later ones are labelled [`OTHER_CLASS`].
pub const MAX_RESOURCE_CLASSES: usize = 64;

/// The class of every resource past the first [`MAX_RESOURCE_CLASSES`] classes.
pub const OTHER_CLASS: &str = "other";

/// The label of a lock taken without a mode (the plain exclusive lock).
const PLAIN: &str = "plain";

/// The `mode` label of a semaphore's permit ([`Redlock::semaphore`](crate::Redlock::semaphore)).
const PERMIT: &str = "permit";

/// The class a resource is labelled by: its text up to the first `:` (`order:42` →
/// `order`), or all of it when it has none. The first [`MAX_RESOURCE_CLASSES`] classes seen
/// by the process keep their name; every later one is [`OTHER_CLASS`], so a resource built
/// from client input cannot make the label set grow without bound.
pub fn resource_class(resource: &str) -> String {
    class_of_resource(resource).to_string()
}

/// A resource class, as the metrics label it: shared, so that a label is not a copy.
pub(crate) type Class = Arc<str>;

/// [`resource_class`], shared.
fn class_of_resource(resource: &str) -> Class {
    static SEEN: OnceLock<Mutex<Classes>> = OnceLock::new();
    let class = resource.split(':').next().unwrap_or(resource);
    SEEN.get_or_init(Mutex::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .bounded(class)
}

/// The resource classes labelled by name so far, at most [`MAX_RESOURCE_CLASSES`].
#[derive(Default)]
struct Classes(HashSet<Class>);

impl Classes {
    /// `class` if it is one of the first [`MAX_RESOURCE_CLASSES`] seen, else [`OTHER_CLASS`].
    fn bounded(&mut self, class: &str) -> Class {
        if let Some(seen) = self.0.get(class) {
            return seen.clone();
        }
        if self.0.len() < MAX_RESOURCE_CLASSES {
            let class: Class = Arc::from(class);
            self.0.insert(class.clone());
            return class;
        }
        Arc::from(OTHER_CLASS)
    }
}

/// The class of a lock on `resource` with `options`: the one the options give
/// ([`LockOptions::resource_class`]), else [`resource_class`]'s.
pub(crate) fn class_of(resource: &str, options: &LockOptions) -> Class {
    match options.resource_class.as_deref() {
        Some(class) => Arc::from(class),
        None => class_of_resource(resource),
    }
}

/// The name of an acquisition's outcome: `acquired`, or the kind of [`LockError`].
fn outcome(result: Result<(), &LockError>) -> &'static str {
    match result {
        Ok(()) => "acquired",
        Err(LockError::Busy { .. }) => "busy",
        Err(LockError::SplitVote { .. }) => "split_vote",
        Err(LockError::Unavailable { .. }) => "unavailable",
        Err(LockError::NoValidity { .. }) => "no_validity",
        Err(LockError::ShuttingDown) => "shutting_down",
        Err(LockError::Lost { .. }) => "lost",
        Err(LockError::Invalid(_)) => "invalid",
        Err(LockError::Entropy(_)) => "entropy",
        Err(LockError::ReleaseUnconfirmed { .. }) => "release_unconfirmed",
        Err(LockError::NotRegistered(_)) => "not_registered",
        Err(LockError::ForeignKey { .. }) => "foreign_key",
        Err(LockError::PermitsMismatch { .. }) => "permits_mismatch",
    }
}

fn mode_label(mode: Option<Mode>) -> &'static str {
    mode.map_or(PLAIN, Mode::as_str)
}

/// The `mode` label of a lock in `mode`, or of a semaphore's permit (`permit`).
fn kind_label(mode: Option<Mode>, permit: bool) -> &'static str {
    if permit { PERMIT } else { mode_label(mode) }
}

fn vote_label(vote: &NodeVote) -> &'static str {
    match vote {
        NodeVote::Acquired => "acquired",
        NodeVote::Held => "held",
        NodeVote::Failed(_) => "failed",
        NodeVote::Undecided => "undecided",
    }
}

fn lost_label(reason: &LostReason) -> &'static str {
    match reason {
        LostReason::Refused(_) => "refused",
        LostReason::Expired => "expired",
        LostReason::Released => "released",
        LostReason::Detached => "detached",
    }
}

/// One acquisition as operators see it: its span (`redlock.acquire`), which records the
/// outcome, wait, attempts and last votes when it ends, and its metrics. Dropped before it
/// ended (the acquiring future was dropped), it records the outcome `cancelled`.
pub(crate) struct Acquisition {
    span: tracing::Span,
    class: Class,
    /// Its `mode` label ([`kind_label`]).
    kind: &'static str,
    started: Instant,
    attempts: u32,
    contended: bool,
    ended: bool,
}

impl Acquisition {
    pub(crate) fn start(
        resource: &str,
        options: &LockOptions,
        (mode, permits): (Option<Mode>, Option<u32>),
    ) -> Self {
        let class = class_of(resource, options);
        let kind = kind_label(mode, permits.is_some());
        let ttl_ms = options.ttl_millis();
        let span = tracing::debug_span!(
            "redlock.acquire",
            redlock.resource = resource,
            redlock.resource_class = &*class,
            redlock.mode = kind,
            redlock.ttl_ms = ttl_ms,
            redlock.permits = tracing::field::Empty,
            redlock.outcome = tracing::field::Empty,
            redlock.attempts = tracing::field::Empty,
            redlock.wait_ms = tracing::field::Empty,
            redlock.votes.granted = tracing::field::Empty,
            redlock.votes.held = tracing::field::Empty,
            redlock.votes.failed = tracing::field::Empty,
            error.type = tracing::field::Empty,
        );
        if let Some(permits) = permits {
            span.record("redlock.permits", permits);
        }
        Self {
            span,
            class,
            kind,
            started: Instant::now(),
            attempts: 0,
            contended: false,
            ended: false,
        }
    }

    /// The class its metrics, and those of the lease it grants, are labelled by.
    pub(crate) fn class(&self) -> &Class {
        &self.class
    }

    /// The span the acquisition runs in.
    pub(crate) fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// The acquisition is at its `attempts`-th attempt, counted as
    /// [`LockError::Busy`]'s `attempts` are (the attempt right after joining a waiter queue
    /// is not a retry).
    pub(crate) fn attempting(&mut self, attempts: u32) {
        self.attempts = attempts;
        self.span.record("redlock.attempts", attempts);
    }

    /// An attempt's quorum round was decided with these votes, each with its node's label.
    pub(crate) fn voted<'a>(
        &mut self,
        votes: impl Iterator<Item = (&'a Arc<str>, &'a NodeVote)> + Clone,
    ) {
        let count = |counted: fn(&NodeVote) -> bool| votes.clone().filter(|v| counted(v.1)).count();
        let held = count(|v| matches!(v, NodeVote::Held));
        self.contended |= held > 0;
        self.span.record(
            "redlock.votes.granted",
            count(|v| matches!(v, NodeVote::Acquired)),
        );
        self.span.record("redlock.votes.held", held);
        self.span.record(
            "redlock.votes.failed",
            count(|v| matches!(v, NodeVote::Failed(_))),
        );
        // Not even the labels without the feature: this runs on every attempt.
        for (node, vote) in votes.filter(|_| cfg!(feature = "metrics")) {
            counter!(
                "redlock_node_votes_total",
                "node" => node.clone(),
                "vote" => vote_label(vote),
            )
            .increment(1);
        }
    }

    /// A waiter woke: by a release's message (`true`) or its fallback timer.
    pub(crate) fn woken(&self, by_message: bool) {
        let by = if by_message { "message" } else { "timer" };
        tracing::trace!(redlock.wake = by, "woken");
        counter!(
            "redlock_wakeups_total",
            "resource_class" => self.class.clone(),
            "by" => by,
        )
        .increment(1);
    }

    /// The acquisition ended with `result`.
    pub(crate) fn end(&mut self, result: Result<(), &LockError>) {
        self.ended = true;
        self.record(outcome(result));
    }

    fn record(&self, outcome: &'static str) {
        let wait = self.started.elapsed();
        self.span.record("redlock.outcome", outcome);
        self.span.record("redlock.wait_ms", millis(wait));
        if outcome != "acquired" {
            self.span.record("error.type", outcome);
        }
        tracing::debug!(
            parent: &self.span,
            redlock.outcome = outcome,
            redlock.attempts = self.attempts,
            redlock.wait_ms = millis(wait),
            "acquisition ended"
        );
        let (class, mode) = (&self.class, self.kind);
        histogram!(
            "redlock_acquire_duration_seconds",
            "resource_class" => class.clone(),
            "mode" => mode,
            "outcome" => outcome,
        )
        .record(wait.as_secs_f64());
        histogram!(
            "redlock_acquire_attempts",
            "resource_class" => class.clone(),
            "mode" => mode,
        )
        .record(f64::from(self.attempts));
        if self.contended {
            counter!("redlock_contended_total", "resource_class" => class.clone()).increment(1);
        }
    }
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        if !self.ended {
            self.record("cancelled");
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// The span of a holder's release (`redlock.release`); `via` is `explicit`, `drop` or
/// `release_all`.
/// The span of one resumption of a detached lock ([`Redlock::resume_with`](crate::Redlock::resume_with)).
pub(crate) fn resume_span(resource: &str) -> tracing::Span {
    tracing::debug_span!("redlock.resume", redlock.resource = resource)
}

pub(crate) fn release_span(resource: &str, class: &str, via: &'static str) -> tracing::Span {
    tracing::debug_span!(
        "redlock.release",
        redlock.resource = resource,
        redlock.resource_class = class,
        redlock.release.via = via,
        redlock.deleted = tracing::field::Empty,
        redlock.answered = tracing::field::Empty,
        redlock.confirmed = tracing::field::Empty,
    )
}

/// A holder's release round ended: recorded on its span.
pub(crate) fn released(span: &tracing::Span, deleted: usize, answered: usize, quorum: usize) {
    span.record("redlock.deleted", deleted);
    span.record("redlock.answered", answered);
    span.record("redlock.confirmed", answered >= quorum);
}

/// A holder's release stayed unconfirmed (fewer than a quorum answered, after every round
/// the caller makes): the lock expires with its ttl.
pub(crate) fn release_unconfirmed(resource: &str, class: &Class, answered: usize, quorum: usize) {
    tracing::warn!(
        redlock.resource = resource,
        redlock.answered = answered,
        redlock.quorum = quorum,
        "release unconfirmed: the lock expires with its ttl"
    );
    counter!(
        "redlock_release_unconfirmed_total",
        "resource_class" => class.clone(),
    )
    .increment(1);
}

/// An operator force-released `resource` ([`Redlock::force_release`](crate::Redlock::force_release)):
/// always a warning, whoever held it, and a count.
pub(crate) fn force_released(resource: &str, removed: usize, answered: usize, nodes: usize) {
    tracing::warn!(
        redlock.resource = resource,
        redlock.removed = removed,
        redlock.answered = answered,
        redlock.nodes = nodes,
        "lock force-released: any holder still alive may work beside the next one until its next extension is refused"
    );
    counter!(
        "redlock_force_releases_total",
        "resource_class" => class_of_resource(resource),
    )
    .increment(1);
}

/// A lease was granted and is now held.
pub(crate) fn held(class: &Class) {
    gauge!("redlock_held", "resource_class" => class.clone()).increment(1.0);
}

/// A lease stopped being held after `hold` (released, or lost and then released).
pub(crate) fn unheld(class: &Class, mode: Option<Mode>, permit: bool, hold: Duration) {
    gauge!("redlock_held", "resource_class" => class.clone()).decrement(1.0);
    histogram!(
        "redlock_hold_duration_seconds",
        "resource_class" => class.clone(),
        "mode" => kind_label(mode, permit),
    )
    .record(hold.as_secs_f64());
}

/// A held lock can no longer be trusted for `reason` (the first reason only; a release is not
/// a loss and is not reported here).
pub(crate) fn lost(resource: &str, class: &Class, reason: &LostReason, held_for: Duration) {
    if matches!(reason, LostReason::Released | LostReason::Detached) {
        return;
    }
    tracing::warn!(
        redlock.resource = resource,
        redlock.lost.reason = lost_label(reason),
        redlock.held_ms = millis(held_for),
        %reason,
        "lock lost: its work may overlap another holder's"
    );
    counter!(
        "redlock_lost_total",
        "resource_class" => class.clone(),
        "reason" => lost_label(reason),
    )
    .increment(1);
}

/// An extension ended with `result`; `was_lost`: the lock could no longer be trusted before
/// it started (nothing was sent).
pub(crate) fn extension(class: &Class, was_lost: bool, result: Result<(), &LockError>) {
    let label = match result {
        Ok(()) => "extended",
        Err(LockError::Lost { .. }) if was_lost => "lost",
        Err(LockError::Lost {
            reason: LostReason::Refused(_),
            ..
        }) => "refused",
        Err(error) => outcome(Err(error)),
    };
    tracing::debug!(redlock.extension = label, "extension ended");
    counter!(
        "redlock_extensions_total",
        "resource_class" => class.clone(),
        "result" => label,
    )
    .increment(1);
}

/// Describes every metric (unit and help text) to the installed recorder: call it once after
/// installing one (a Prometheus exporter, say) so that the scrape carries `# HELP` lines.
#[cfg(feature = "metrics")]
pub fn describe_metrics() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        "redlock_acquire_duration_seconds",
        Unit::Seconds,
        "Time from asking for a lock to its outcome (acquired, busy, unavailable, ...), by resource class, mode and outcome."
    );
    describe_histogram!(
        "redlock_acquire_attempts",
        Unit::Count,
        "Attempts (Redlock rounds) one acquisition made, by resource class and mode."
    );
    describe_counter!(
        "redlock_contended_total",
        Unit::Count,
        "Acquisitions that found another holder on at least one attempt, by resource class."
    );
    describe_counter!(
        "redlock_node_votes_total",
        Unit::Count,
        "Each node's answers to acquisition attempts (acquired, held, failed, undecided), by node: a sick node shows as failed."
    );
    describe_counter!(
        "redlock_extensions_total",
        Unit::Count,
        "Extensions by result (extended, refused, unavailable, lost, ...), by resource class."
    );
    describe_counter!(
        "redlock_lost_total",
        Unit::Count,
        "Held locks that could no longer be trusted, by resource class and reason (expired, refused)."
    );
    describe_counter!(
        "redlock_force_releases_total",
        Unit::Count,
        "Force-releases an operator made (whoever held the lock), by resource class."
    );
    describe_histogram!(
        "redlock_hold_duration_seconds",
        Unit::Seconds,
        "How long locks were held, from the attempt that took them to their release, by resource class and mode."
    );
    describe_gauge!(
        "redlock_held",
        Unit::Count,
        "Locks held now through this process's handles, by resource class."
    );
    describe_counter!(
        "redlock_release_unconfirmed_total",
        Unit::Count,
        "Releases fewer than a quorum confirmed (the lock expires with its ttl), by resource class."
    );
    describe_counter!(
        "redlock_wakeups_total",
        Unit::Count,
        "Waiters woken, by a release's message or by their fallback timer, by resource class."
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_are_bounded_and_keep_their_first_names() {
        let mut classes = Classes::default();
        for i in 0..MAX_RESOURCE_CLASSES {
            assert_eq!(&*classes.bounded(&format!("c{i}")), format!("c{i}"));
        }
        // Full: a new class is "other", a known one keeps its name.
        assert_eq!(&*classes.bounded("new"), OTHER_CLASS);
        assert_eq!(&*classes.bounded("c0"), "c0");
        assert_eq!(
            &*classes.bounded(&format!("c{}", MAX_RESOURCE_CLASSES - 1)),
            format!("c{}", MAX_RESOURCE_CLASSES - 1)
        );
        assert_eq!(classes.0.len(), MAX_RESOURCE_CLASSES);
    }

    #[test]
    fn the_class_is_the_resource_up_to_its_first_colon() {
        assert_eq!(resource_class("order:42:lines"), "order");
        assert_eq!(resource_class("nightly-report"), "nightly-report");
        assert_eq!(resource_class(":x"), "");
    }

    #[test]
    fn every_error_has_an_outcome_name() {
        assert_eq!(outcome(Ok(())), "acquired");
        assert_eq!(outcome(Err(&LockError::ShuttingDown)), "shutting_down");
        assert_eq!(
            outcome(Err(&LockError::Lost {
                resource: "r".into(),
                reason: LostReason::Expired
            })),
            "lost"
        );
    }
}
