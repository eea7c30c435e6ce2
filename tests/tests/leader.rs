//! Leader election (`Redlock::leader_election`) and waiting forever, against real servers:
//! one leader at a time (an interval checker over every term, and a count of leaders inside
//! at once), a term ended by the lost signal, re-acquisition after a loss, take-over after a
//! leader is killed or cut off, shutdown.

#![allow(clippy::unwrap_used)] // tests unwrap: a failure is the assertion

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;
use tokio::time::Instant;

use redlock_core::{Leader, LeaderWatch, LockError, LockOptions, LostReason, Redlock, Term};
use redlock_tests::checker::History;
use redlock_tests::{RedisNodes, free_within, is_free, proxy_urls, redlock_with, within};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const RESOURCE: &str = "leader:scheduler";

/// What the candidates' terms tell the test.
#[derive(Debug)]
enum Event {
    Began {
        holder: usize,
        term: Term,
        at: Instant,
    },
    Ended {
        holder: usize,
        number: u64,
        at: Instant,
    },
}

/// Every term of every candidate: the checker's history, the count of leaders inside at
/// once and its maximum, and the events.
struct Terms {
    history: History,
    inside: AtomicU32,
    most_inside: AtomicU32,
    events: mpsc::UnboundedSender<Event>,
}

impl Terms {
    fn new() -> (Arc<Self>, mpsc::UnboundedReceiver<Event>) {
        let (events, received) = mpsc::unbounded_channel();
        let terms = Self {
            history: History::new(),
            inside: AtomicU32::new(0),
            most_inside: AtomicU32::new(0),
            events,
        };
        (Arc::new(terms), received)
    }
}

/// One term from the moment it begins; recorded (checker, count, event) when its future is
/// dropped, however the term ended.
struct Record {
    holder: usize,
    term: Term,
    start: Instant,
    terms: Arc<Terms>,
}

impl Record {
    fn begin(holder: usize, term: Term, terms: &Arc<Terms>) -> Self {
        let start = Instant::now();
        let inside = terms.inside.fetch_add(1, Ordering::SeqCst) + 1;
        terms.most_inside.fetch_max(inside, Ordering::SeqCst);
        let _ = terms.events.send(Event::Began {
            holder,
            term: term.clone(),
            at: start,
        });
        Self {
            holder,
            term,
            start,
            terms: Arc::clone(terms),
        }
    }
}

impl Drop for Record {
    fn drop(&mut self) {
        let now = Instant::now();
        self.terms.inside.fetch_sub(1, Ordering::SeqCst);
        // The whole term, not clipped at its lock's validity: two terms running at once are
        // an overlap even when one of them outlived its lock (the failure a leader election
        // must prevent).
        self.terms.history.record(self.holder, self.start, now, now);
        let _ = self.terms.events.send(Event::Ended {
            holder: self.holder,
            number: self.term.number(),
            at: now,
        });
    }
}

/// A candidate running in its own task, with its shutdown signal.
struct Candidate {
    task: JoinHandle<Result<(), LockError>>,
    shutdown: CancellationToken,
}

impl Candidate {
    /// Campaigns on `redlock` as `holder`; each term lasts `term` (then steps down), or until
    /// it ends otherwise when `None`.
    fn start(
        redlock: &Redlock,
        holder: usize,
        options: &LockOptions,
        terms: &Arc<Terms>,
        term: Option<Duration>,
    ) -> Self {
        let shutdown = CancellationToken::new();
        let election = redlock
            .leader_election(RESOURCE)
            .options(options.clone())
            .with_shutdown(shutdown.clone());
        let terms = Arc::clone(terms);
        let task = tokio::spawn(election.run(move |t| {
            let record = Record::begin(holder, t, &terms);
            async move {
                let _record = record;
                match term {
                    Some(length) => tokio::time::sleep(length).await,
                    None => std::future::pending().await,
                }
            }
        }));
        Self { task, shutdown }
    }

    /// [`start`](Self::start) on a handle of its own over `nodes`, as another process would.
    async fn on(
        nodes: &RedisNodes,
        holder: usize,
        options: &LockOptions,
        terms: &Arc<Terms>,
        term: Option<Duration>,
    ) -> Self {
        let redlock = redlock_with(nodes, options.clone()).await;
        Self::start(&redlock, holder, options, terms, term)
    }

    /// Cancels its shutdown signal and waits for `run` to return.
    async fn stop(self) -> Result<(), LockError> {
        self.shutdown.cancel();
        within("the election to end", self.task).await.unwrap()
    }
}

/// The next event, within 10 s.
async fn next(events: &mut mpsc::UnboundedReceiver<Event>) -> Event {
    within("a term event", events.recv()).await.unwrap()
}

/// Waits for the next term to begin; returns its holder, term and start.
async fn next_began(events: &mut mpsc::UnboundedReceiver<Event>) -> (usize, Term, Instant) {
    loop {
        if let Event::Began { holder, term, at } = next(events).await {
            return (holder, term, at);
        }
    }
}

/// Waits for the term `number` of `holder` to end; returns when.
async fn ended(events: &mut mpsc::UnboundedReceiver<Event>, who: usize, term: u64) -> Instant {
    loop {
        if let Event::Ended { holder, number, at } = next(events).await
            && (holder, number) == (who, term)
        {
            return at;
        }
    }
}

fn options(ttl_ms: u64) -> LockOptions {
    LockOptions::default()
        .ttl(Duration::from_millis(ttl_ms))
        .retry_delay(Duration::from_millis(50))
        .retry_jitter(Duration::from_millis(20))
}

fn assert_one_leader_at_a_time(terms: &Terms) {
    let overlaps = terms.history.overlaps();
    assert!(overlaps.is_empty(), "two leaders at once: {overlaps:?}");
    assert_eq!(terms.most_inside.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_candidates_take_turns_and_never_lead_at_once() {
    let nodes = RedisNodes::start(5);
    let options = options(1_000).fencing(true);
    let (terms, mut events) = Terms::new();
    // Each term steps down after 40 ms: the release hands the lock to the other candidate.
    let candidates = [
        Candidate::on(&nodes, 0, &options, &terms, Some(Duration::from_millis(40))).await,
        Candidate::on(&nodes, 1, &options, &terms, Some(Duration::from_millis(40))).await,
    ];
    let mut led = [0u32; 2];
    let mut fences = Vec::new();
    while led.iter().sum::<u32>() < 20 {
        let (holder, term, _) = next_began(&mut events).await;
        led[holder] += 1;
        fences.push(term.fencing_token().unwrap());
    }
    for candidate in candidates {
        candidate.stop().await.unwrap();
    }
    assert!(led.iter().all(|&n| n >= 5), "terms per candidate: {led:?}");
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fencing tokens not increasing from term to term: {fences:?}"
    );
    assert_one_leader_at_a_time(&terms);
    let probe = redlock_tests::redlock(&nodes).await;
    // A last release may have handed the key to the other candidate's waiter, stopping at
    // the same moment: its reservation lasts the hand-over grace, not the ttl.
    let waited = free_within(&probe, RESOURCE).await;
    assert!(
        waited < redlock_core::DEFAULT_HANDOVER_GRACE + Duration::from_millis(500),
        "not released at shutdown: free after {waited:?}"
    );
}

#[tokio::test]
async fn deleted_keys_end_the_term_through_the_lost_signal_and_the_candidate_leads_again() {
    let nodes = RedisNodes::start(5);
    // Extended every 200 ms: the first extension after the deletion finds the keys gone.
    let options = options(600);
    let redlock = redlock_with(&nodes, options.clone()).await;
    let (terms, mut events) = Terms::new();
    let candidate = Candidate::start(&redlock, 0, &options, &terms, None);
    let (_, first, began) = next_began(&mut events).await;
    assert_eq!(first.number(), 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    nodes.delete(&redlock.key_for(RESOURCE)).await;
    let end = ended(&mut events, 0, 1).await;
    assert!(first.is_ended(), "the term's end signal did not fire");
    assert!(
        matches!(first.info().lost().reason(), Some(LostReason::Refused(_))),
        "{:?}",
        first.info().lost().reason()
    );
    // Before the lock would have run out unextended: the extension saw the loss.
    assert!(
        end < began + Duration::from_millis(600),
        "{:?}",
        end - began
    );
    let (holder, second, _) = next_began(&mut events).await;
    assert_eq!((holder, second.number()), (0, 2), "no second term");
    candidate.stop().await.unwrap();
    assert_one_leader_at_a_time(&terms);
}

#[tokio::test]
async fn an_aborted_leader_task_lets_the_other_candidate_lead_within_a_ttl() {
    let nodes = RedisNodes::start(5);
    let options = options(2_000);
    let (terms, mut events) = Terms::new();
    let first = Candidate::on(&nodes, 0, &options, &terms, None).await;
    let (holder, term, _) = next_began(&mut events).await;
    assert_eq!(holder, 0);
    let second = Candidate::on(&nodes, 1, &options, &terms, None).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let aborted = Instant::now();
    first.task.abort();
    let (holder, _, began) = next_began(&mut events).await;
    assert_eq!(holder, 1);
    assert!(
        term.is_ended(),
        "the aborted term's end signal did not fire"
    );
    // The dropped guard is released at once; without that, the ttl (2 s) would pass first.
    assert!(
        began - aborted < options.ttl,
        "took over after {:?}",
        began - aborted
    );
    second.stop().await.unwrap();
    assert_one_leader_at_a_time(&terms);
}

#[tokio::test]
async fn a_leader_cut_off_from_every_node_ends_its_term_before_the_other_leads() {
    let nodes = RedisNodes::start(5);
    let options = options(1_000);
    let proxies = nodes.proxies();
    let cut_off = Redlock::builder()
        .nodes(proxy_urls(&proxies))
        .lock_options(options.clone())
        .build()
        .await
        .unwrap();
    let (terms, mut events) = Terms::new();
    let first = Candidate::start(&cut_off, 0, &options, &terms, None);
    let (holder, term, _) = next_began(&mut events).await;
    assert_eq!(holder, 0);
    let second = Candidate::on(&nodes, 1, &options, &terms, None).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A crashed or partitioned leader: nothing it sends arrives, so its lock can only expire.
    let cut = Instant::now();
    proxies
        .iter()
        .for_each(redlock_tests::proxy::Proxy::partition);
    let (holder, _, began) = next_began(&mut events).await;
    assert_eq!(holder, 1);
    assert!(
        term.is_ended(),
        "the cut-off leader's term still ran when the other took over"
    );
    assert_eq!(term.info().lost().reason(), Some(LostReason::Expired));
    assert!(
        began - cut < options.ttl + Duration::from_secs(1),
        "took over after {:?}",
        began - cut
    );
    // The cut-off candidate campaigns in vain until its shutdown.
    first.stop().await.unwrap();
    second.stop().await.unwrap();
    assert_one_leader_at_a_time(&terms);
}

#[tokio::test]
async fn shutdown_ends_the_campaign_and_the_term_and_releases() {
    let nodes = RedisNodes::start(5);
    let options = options(30_000);
    let probe = redlock_tests::redlock(&nodes).await;
    let (terms, mut events) = Terms::new();
    let leader = Candidate::on(&nodes, 0, &options, &terms, None).await;
    let (_, term, _) = next_began(&mut events).await;
    let waiting = Candidate::on(&nodes, 1, &options, &terms, None).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    // A campaigning candidate stops waiting.
    waiting.stop().await.unwrap();
    // The leader's term ends and its lock is released (a 30 s ttl: free now means released).
    leader.stop().await.unwrap();
    assert!(term.is_ended());
    assert!(
        is_free(&probe, RESOURCE).await,
        "the leader's lock was not released"
    );
    assert_eq!(terms.history.len(), 1);

    // The handle's own shutdown ends an election too: it releases the lock (the term ends)
    // and refuses the next campaign.
    let redlock = redlock_with(&nodes, options.clone()).await;
    let leader = Candidate::start(&redlock, 2, &options, &terms, None);
    let (_, term, _) = next_began(&mut events).await;
    redlock.shutdown(Duration::from_secs(1)).await;
    within("the election to end", leader.task)
        .await
        .unwrap()
        .unwrap();
    assert!(term.is_ended());
    assert!(is_free(&probe, RESOURCE).await);
}

/// The leader's lock is taken with `wait_forever`: it waits past any retry budget. The same
/// wait with the default retries gives up.
#[tokio::test]
async fn waiting_forever_outlasts_the_default_retries() {
    let nodes = RedisNodes::start(5);
    let holder = redlock_tests::redlock(&nodes).await;
    let waiter = redlock_tests::redlock(&nodes).await;
    let defaults = waiter.options().clone();
    let budget = (defaults.retry_delay + defaults.retry_jitter) * defaults.retry_count;
    let hold = Duration::from_millis(1_200);
    assert!(hold > budget * 3);

    // Released after `hold`: the default retries give up before, waiting forever does not.
    let held = holder.lock("job").await.unwrap();
    let error = waiter.lock("job").await.unwrap_err();
    assert!(error.is_busy(), "{error}");
    let started = Instant::now();
    let release = tokio::spawn(async move {
        tokio::time::sleep(hold).await;
        held.release().await.unwrap();
    });
    let forever = defaults.clone().wait_forever();
    let guard = within("waiting forever", waiter.lock_with("job", &forever))
        .await
        .unwrap();
    assert!(started.elapsed() >= hold, "{:?}", started.elapsed());
    guard.release().await.unwrap();
    release.await.unwrap();

    // A holder that never releases (a crashed process): its key expires after its ttl, and
    // the waiter, woken by no release, still gets it by its retries.
    let short = defaults.clone().ttl(hold);
    std::mem::forget(holder.lock_with("crashed", &short).await.unwrap());
    let started = Instant::now();
    let guard = within("waiting forever", waiter.lock_with("crashed", &forever))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= hold - Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
    guard.release().await.unwrap();
}

/// A handle over `nodes` labelled `owner`, with `options` as its defaults.
async fn labelled(nodes: &RedisNodes, owner: &str, options: &LockOptions) -> Redlock {
    Redlock::builder()
        .nodes(nodes.urls())
        .lock_options(options.clone())
        .owner(owner)
        .build()
        .await
        .unwrap()
}

/// The next leader `watch` reports that is somebody (skipping reports that nobody leads),
/// within `limit`.
async fn next_leader(watch: &mut LeaderWatch, limit: Duration) -> Leader {
    let wait = async {
        loop {
            if let Some(leader) = watch.changed().await.unwrap() {
                return leader;
            }
        }
    };
    tokio::time::timeout(limit, wait)
        .await
        .unwrap_or_else(|_| panic!("no new leader reported within {limit:?}"))
}

/// Two candidates hand the lead to each other; a watch whose poll is far too slow to explain
/// it reports each new term from the releases published on the resource's channel, soon
/// after the term begins, and in the order the terms began.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_reports_each_hand_over_from_the_channel() {
    let nodes = RedisNodes::start(5);
    let options = options(2_000);
    let (terms, mut events) = Terms::new();
    let handles = [
        labelled(&nodes, "a", &options).await,
        labelled(&nodes, "b", &options).await,
    ];
    let term = Some(Duration::from_millis(300));
    let candidates = [
        Candidate::start(&handles[0], 0, &options, &terms, term),
        Candidate::start(&handles[1], 1, &options, &terms, term),
    ];
    let (first, _, _) = next_began(&mut events).await;
    let observer = redlock_tests::redlock(&nodes).await;
    let mut watch = observer
        .leader_election(RESOURCE)
        .watch()
        .poll_interval(Duration::from_secs(60));
    // The first report is the leader now (read at once, whatever the poll).
    let mut previous = next_leader(&mut watch, Duration::from_secs(2)).await;
    assert_eq!(previous.owner(), Some(["a", "b"][first]));
    for _ in 0..6 {
        let leader = next_leader(&mut watch, Duration::from_secs(2)).await;
        let reported = Instant::now();
        assert_ne!(leader, previous, "the same term reported twice");
        // The term reported is the last one to begin, and began a moment ago.
        let (holder, at) = loop {
            match events.try_recv() {
                Ok(Event::Began { holder, at, .. }) => {
                    if !matches!(events.try_recv(), Ok(Event::Began { .. })) {
                        break (holder, at);
                    }
                }
                Ok(Event::Ended { .. }) => {}
                Err(_) => {
                    let (holder, _, at) = next_began(&mut events).await;
                    break (holder, at);
                }
            }
        };
        assert_eq!(leader.owner(), Some(["a", "b"][holder]));
        assert!(
            reported.saturating_duration_since(at) < Duration::from_millis(1_000),
            "reported {:?} after the term began",
            reported.saturating_duration_since(at)
        );
        previous = leader;
    }
    for candidate in candidates {
        candidate.stop().await.unwrap();
    }
    assert_one_leader_at_a_time(&terms);
}

/// With nobody waiting, nothing is published: the poll reports a leader killed (cut off from
/// every node, so its lock expires), the next candidate's term, and that candidate stepping
/// down, each within the poll interval of the change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_polls_for_changes_nobody_publishes() {
    let nodes = RedisNodes::start(5);
    let options = options(1_000);
    let proxies = nodes.proxies();
    let doomed = Redlock::builder()
        .nodes(proxy_urls(&proxies))
        .lock_options(options.clone())
        .owner("doomed")
        .build()
        .await
        .unwrap();
    let (terms, mut events) = Terms::new();
    let first = Candidate::start(&doomed, 0, &options, &terms, None);
    next_began(&mut events).await;
    let observer = redlock_tests::redlock(&nodes).await;
    let poll = Duration::from_millis(100);
    let mut watch = observer
        .leader_election(RESOURCE)
        .watch()
        .poll_interval(poll);
    let leader = next_leader(&mut watch, Duration::from_secs(2)).await;
    assert_eq!(leader.owner(), Some("doomed"));

    // Killed: nothing it sends arrives; its lock expires within the ttl.
    let cut = Instant::now();
    proxies
        .iter()
        .for_each(redlock_tests::proxy::Proxy::partition);
    let nobody = tokio::time::timeout(Duration::from_secs(3), watch.changed())
        .await
        .expect("the killed leader's end was not reported")
        .unwrap();
    assert_eq!(nobody, None);
    assert!(
        cut.elapsed() < options.ttl + poll + Duration::from_millis(500),
        "reported {:?} after the leader was cut off",
        cut.elapsed()
    );

    // A candidate nobody waits for: its term comes from the poll.
    let successor = labelled(&nodes, "successor", &options).await;
    let second = Candidate::start(&successor, 1, &options, &terms, None);
    let (_, _, began) = next_began(&mut events).await;
    let leader = next_leader(&mut watch, Duration::from_secs(2)).await;
    assert_eq!(leader.owner(), Some("successor"));
    assert!(began.elapsed() < poll + Duration::from_millis(500));

    // It steps down (shutdown releases) with nobody waiting: nothing is published.
    let stepped_down = Instant::now();
    second.stop().await.unwrap();
    let nobody = tokio::time::timeout(Duration::from_secs(2), watch.changed())
        .await
        .expect("the step-down was not reported")
        .unwrap();
    assert_eq!(nobody, None);
    assert!(stepped_down.elapsed() < poll + Duration::from_millis(500));
    first.stop().await.unwrap();
    assert_one_leader_at_a_time(&terms);
}

/// A watch cut off from the nodes reports nothing (not "nobody leads": it cannot tell), and
/// once the partition heals it reports the leader that took over meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_watch_reports_nothing_until_it_can_read_a_quorum() {
    let nodes = RedisNodes::start(5);
    let options = options(1_000);
    let (terms, mut events) = Terms::new();
    let a = labelled(&nodes, "a", &options).await;
    let first = Candidate::start(&a, 0, &options, &terms, None);
    next_began(&mut events).await;
    let proxies = nodes.proxies();
    let observer = Redlock::builder()
        .nodes(proxy_urls(&proxies))
        .build()
        .await
        .unwrap();
    let mut watch = observer
        .leader_election(RESOURCE)
        .watch()
        .poll_interval(Duration::from_millis(100));
    let leader = next_leader(&mut watch, Duration::from_secs(2)).await;
    assert_eq!(leader.owner(), Some("a"));

    proxies
        .iter()
        .for_each(redlock_tests::proxy::Proxy::partition);
    // Meanwhile the lead passes to another candidate.
    first.stop().await.unwrap();
    let b = labelled(&nodes, "b", &options).await;
    let second = Candidate::start(&b, 1, &options, &terms, None);
    next_began(&mut events).await;
    let silent = tokio::time::timeout(Duration::from_secs(1), watch.changed()).await;
    assert!(silent.is_err(), "a cut-off watch reported {silent:?}");

    proxies.iter().for_each(redlock_tests::proxy::Proxy::heal);
    let leader = next_leader(&mut watch, Duration::from_secs(5)).await;
    assert_eq!(leader.owner(), Some("b"));
    second.stop().await.unwrap();
    assert_one_leader_at_a_time(&terms);
}
