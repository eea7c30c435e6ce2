//! One node's script pipeline: every script call to the node goes through one task, which
//! sends the calls issued while it was busy as one `EVALSHA` of the dispatch script
//! ([`BATCH`]), in the order they were issued.
//!
//! fred flushes the socket after every `EVALSHA` (`CommandKind::should_flush`), so one script
//! per call costs one write and one read on both sides per call: under concurrency the
//! releases of many lockers never shared a write. Here a call waits for nothing: the task
//! takes what is queued when it wakes (one call when the node is idle, everything issued
//! meanwhile under load, up to [`MAX_BATCH`]) and hands it to the client at once, without
//! waiting for the replies of the batches before it (auto-pipelining, as ioredis does it).
//!
//! Order: calls reach the client in the order they were queued, and a batch runs them in
//! that order; every call taken from the queue is sent, as a command handed to the client
//! is. A batch sent again (`NOSCRIPT`, or refused as a whole) carries only the calls whose
//! caller still waits, and the releases: an attempt whose round is over has queued its
//! clean-up, which must not meet a `SET` sent after it.
//!
//! A batch is one script: atomic, and one command for the node's limits. At `maxmemory`, a
//! write in a batch that already freed memory (a release's `DEL`) is let through where the
//! same write alone would get `OOM`, as inside any script.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use fred::bytes::{Bytes, BytesMut};
use fred::bytes_utils::Str;
use fred::types::{Key, Value};
use futures_util::stream::FuturesUnordered;
use futures_util::{FutureExt, StreamExt};
use tokio::sync::{mpsc, oneshot};

use super::scripts::{BATCH, Batch, ERROR_MARKER, SET_NX, Script, batch_head};
use super::transport::Transport;
use crate::outcome::{ClientError, NodeError};

/// The most calls one `EVALSHA` carries.
const MAX_BATCH: usize = 64;

/// How long the calls issued while a batch is out wait for its answer before they leave
/// anyway (rounded up to the timer's next millisecond). While the last batch sent is younger
/// than this and unanswered, the calls issued meanwhile wait in the queue and leave together as
/// the next batch at its answer (a batch cut at [`MAX_BATCH`] holds nothing: the calls left in
/// the queue follow it at once): under load
/// a node then gets one script call per round trip carrying every locker's calls (each
/// locker's acquisition and release in the same batch), instead of many small ones. With 32
/// lockers on 5 nodes, batches of about 17 calls against about 2.5 when every wake-up sent its
/// own, and 1.6× the cycles per second. A node slow to answer (a delayed reply, a paused
/// process) holds them no longer than this: a call is never kept from the wire for a round
/// trip it does not need. A call made while the node is idle is sent by its caller at once
/// ([`Pipeline::issue`]), so a client in sequence never waits here.
const HOLD: Duration = Duration::from_millis(1);

/// A handle on one node's pipeline task; the task ends when every handle is gone and its
/// batches in flight are answered.
#[derive(Clone)]
pub(crate) struct Pipeline {
    tx: mpsc::UnboundedSender<Message>,
    transport: Arc<dyn Transport>,
    /// Calls made and not yet answered (or given up by their caller, once sent): while there
    /// are none, a call is sent by its caller ([`Pipeline::call`]).
    outstanding: Arc<AtomicUsize>,
    /// Calls handed to the task and not yet handed by it to the client: while there are
    /// none, every call made so far is with the client, so a command sent by its caller
    /// goes after all of them ([`Pipeline::set_nx`]); while there are some, a `SET NX` joins
    /// their batch.
    unsent: Arc<AtomicUsize>,
}

/// What the task is handed.
enum Message {
    /// A call to send in the next batch.
    Call(Call),
    /// A call to be finished, sent by its caller (already handed to the client), whose
    /// caller stopped waiting: the task awaits its answer like a batch of its own, so that a
    /// `NOSCRIPT` sends it again by source, in order with the batches after it, on the
    /// handle's runtime.
    Adopt(Call, Answer),
    /// A call sent by its caller that the node answered `NOSCRIPT`: sent again by source, as
    /// a batch of its own, after the calls queued before it.
    Again(Call),
}

/// One script call waiting to be sent.
struct Call {
    script: &'static Script,
    keys: Vec<Value>,
    args: Vec<Value>,
    /// Sent (and sent again on `NOSCRIPT`) even after its caller stopped waiting: a release,
    /// which must delete its key whenever it lands.
    finish: bool,
    reply: oneshot::Sender<Result<Value, NodeError>>,
    /// Counts the call as outstanding until it is dropped, after its answer.
    _outstanding: Outstanding,
}

/// One outstanding call on a node ([`Pipeline::outstanding`]), until dropped.
struct Outstanding(Arc<AtomicUsize>);

impl Drop for Outstanding {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Call {
    /// Still worth sending.
    fn wanted(&self) -> bool {
        self.finish || !self.reply.is_closed()
    }
}

/// How a batch is sent: by the dispatch script's SHA1, or, when the node answered
/// `NOSCRIPT` (its script cache is empty after a restart or `SCRIPT FLUSH`), by its source.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Sha1,
    Source,
}

/// The answer to one command, once it has been handed to the client.
type Answer = Pin<Box<dyn Future<Output = Result<Value, NodeError>> + Send>>;

type Sent = Pin<Box<dyn Future<Output = (Vec<Call>, By, Result<Value, NodeError>)> + Send>>;

impl Pipeline {
    /// Starts the pipeline task of the node `transport` reaches, on the current tokio
    /// runtime.
    pub(crate) fn start(transport: Arc<dyn Transport>) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let outstanding = Arc::new(AtomicUsize::new(0));
        let unsent = Arc::new(AtomicUsize::new(0));
        tokio::spawn(run(transport.clone(), rx, unsent.clone()));
        Self {
            tx,
            transport,
            outstanding,
            unsent,
        }
    }

    /// Runs `script` on `keys` and `args` in the node's next batch, and returns its reply.
    /// Unbounded in time by itself: every caller bounds it. The call is made on the first
    /// poll ([`issue`](Self::issue) makes it at once) and sent with the next batch even if
    /// this future is dropped first (a dropped acquisition's clean-up follows it on the same
    /// connection); only a batch sent again (after `NOSCRIPT`, or a refusal of the whole
    /// batch) leaves out the calls nobody waits for any more, unless `finish` (see
    /// [`Call::finish`]).
    pub(crate) async fn call(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[Arg<'_>],
        finish: bool,
    ) -> Result<Value, NodeError> {
        self.issue(script, keys, args, finish).await
    }

    /// Makes the call now, before the returned future is polled, and returns its answer: a
    /// call that must be finished (a release) is then sent even if its future is dropped
    /// unpolled, as a round decided at quorum drops the calls it has not polled yet.
    pub(crate) fn issue(
        &self,
        script: &'static Script,
        keys: &[&str],
        args: &[Arg<'_>],
        finish: bool,
    ) -> impl Future<Output = Result<Value, NodeError>> + Send + use<> {
        let (keys, args) = shared(keys, args);
        // Nothing is waiting to be sent to this node, nor waiting for its answer: the call
        // goes out at once, as a batch of one, without the task's two hops. Every call made
        // before it has been handed to the client already (a call counts as outstanding from
        // before it is queued until after its batch was handed over and answered), so the
        // order holds; the calls made while it is outstanding go through the task and are
        // batched.
        let issued = if self
            .outstanding
            .compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            let counted = Outstanding(self.outstanding.clone());
            Issued::Direct(Direct::start(self, script, keys, args, finish, counted))
        } else {
            self.outstanding.fetch_add(1, Ordering::AcqRel);
            let counted = Outstanding(self.outstanding.clone());
            Issued::Queued(queue(
                (&self.tx, &self.unsent),
                script,
                Again {
                    keys,
                    args,
                    counted,
                },
                finish,
                By::Sha1,
            ))
        };
        let (tx, unsent) = (self.tx.clone(), self.unsent.clone());
        async move {
            let answer = match issued {
                Issued::Direct(direct) => match direct.await {
                    Ok(answer) => return answer,
                    // `NOSCRIPT`: sent again by source, through the task.
                    Err(again) => queue((&tx, &unsent), script, again, finish, By::Source)?,
                },
                Issued::Queued(answer) => answer?,
            };
            answer.await.unwrap_or(Err(NodeError::Disconnected))
        }
    }

    /// Acquires one key with the node's own `SET key token NX PX ttl_ms GET`
    /// ([`Transport::set_nx`]), made now, in order with the script calls: sent by its caller
    /// when the task holds no call yet to be handed to the client, else as a call of
    /// [`SET_NX`] (the same command, run by the dispatch script) in the batch of the calls
    /// queued before it, which it does not split. (A batch the node answered `NOSCRIPT` is sent again by source
    /// when its answer comes, and a `SET` made meanwhile goes before it: a `SET NX` of a new
    /// token can then only be refused where a release has not landed yet, never take a key
    /// it should not.) Unbounded in time by itself: every caller bounds it.
    pub(crate) fn set_nx(
        &self,
        key: &str,
        token: &str,
        ttl_ms: i64,
    ) -> impl Future<Output = Result<Value, NodeError>> + Send + use<> {
        // Every call made before it is with the client already when the task holds none:
        // then it is sent by its caller, after them, and may share their write.
        let direct = self.unsent.load(Ordering::Acquire) == 0;
        self.outstanding.fetch_add(1, Ordering::AcqRel);
        let counted = Outstanding(self.outstanding.clone());
        let issued = if direct {
            // The first poll hands the command to the client, now.
            let mut sent = self
                .transport
                .set_nx(Key::from(key), Value::from(token), ttl_ms);
            let sent: Answer = match sent.as_mut().now_or_never() {
                Some(done) => Box::pin(std::future::ready(done)),
                None => sent,
            };
            Ok((sent, counted))
        } else {
            // The lock key alone, with the token and the ttl: the quarantine is off and there
            // is no owner label (as the command is only sent then), so the dispatch script
            // runs the command inline (`Inline::SetNx` in scripts.rs).
            let again = Again {
                keys: vec![Value::from(key)],
                args: vec![Value::from(token), Value::Integer(ttl_ms)],
                counted,
            };
            Err(queue(
                (&self.tx, &self.unsent),
                &SET_NX,
                again,
                false,
                By::Sha1,
            ))
        };
        async move {
            match issued {
                Ok((sent, counted)) => {
                    let answer = sent.await;
                    drop(counted);
                    answer
                }
                Err(Ok(answer)) => answer.await.unwrap_or(Err(NodeError::Disconnected)),
                Err(Err(error)) => Err(error),
            }
        }
    }
}

/// One argument of a script call, borrowed from its caller: unlike a [`Value`] made from a
/// `&str`, its text is not copied before the call's one buffer is made ([`shared`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Arg<'a> {
    /// A string.
    Text(&'a str),
    /// An integer, sent as its decimal digits.
    Int(i64),
}

impl<'a> From<&'a str> for Arg<'a> {
    fn from(text: &'a str) -> Self {
        Self::Text(text)
    }
}

impl<'a> From<&'a String> for Arg<'a> {
    fn from(text: &'a String) -> Self {
        Self::Text(text)
    }
}

/// A call's keys and arguments as values that are copied by a count, not a copy of their
/// text: every string among them is a slice of one buffer, so that the copies a call's
/// command and its record for a `NOSCRIPT` need cost no allocation each (a value made from
/// a `&str` copies its text, and again at its first copy). Integers stay integers.
fn shared(keys: &[&str], args: &[Arg<'_>]) -> (Vec<Value>, Vec<Value>) {
    let text = |arg: &Arg<'_>| match *arg {
        Arg::Text(text) => text.len(),
        Arg::Int(_) => 0,
    };
    let len = keys.iter().map(|k| k.len()).sum::<usize>() + args.iter().map(text).sum::<usize>();
    let mut buffer = BytesMut::with_capacity(len);
    for text in keys
        .iter()
        .copied()
        .chain(args.iter().filter_map(|arg| match *arg {
            Arg::Text(text) => Some(text),
            Arg::Int(_) => None,
        }))
    {
        buffer.extend_from_slice(text.as_bytes());
    }
    let mut buffer = buffer.freeze();
    let mut next = |len: usize| buffer.split_to(len);
    let keys = keys.iter().map(|k| string(next(k.len()), k)).collect();
    let args = args
        .iter()
        .map(|arg| match *arg {
            Arg::Text(text) => string(next(text.len()), text),
            Arg::Int(n) => Value::Integer(n),
        })
        .collect();
    (keys, args)
}

/// The string `text` held in `bytes` (its copy), as a value.
fn string(bytes: Bytes, text: &str) -> Value {
    match Str::from_inner(bytes) {
        Ok(shared) => Value::String(shared),
        // Not reached: the bytes are a copy of `text`.
        Err(_) => Value::from(text),
    }
}

/// A call made: sent by its caller, or queued for the task.
enum Issued {
    Direct(Direct),
    Queued(Result<oneshot::Receiver<Result<Value, NodeError>>, NodeError>),
}

/// Hands a call to the task, to be sent in its next batch (`By::Sha1`) or, for a call the
/// node answered `NOSCRIPT`, by source on its own (`By::Source`); returns where its answer
/// comes.
fn queue(
    (tx, unsent): (&mpsc::UnboundedSender<Message>, &AtomicUsize),
    script: &'static Script,
    again: Again,
    finish: bool,
    by: By,
) -> Result<oneshot::Receiver<Result<Value, NodeError>>, NodeError> {
    let (reply, answer) = oneshot::channel();
    let call = Call {
        script,
        keys: again.keys,
        args: again.args,
        finish,
        reply,
        _outstanding: again.counted,
    };
    let message = match by {
        By::Sha1 => Message::Call(call),
        By::Source => Message::Again(call),
    };
    send_unsent((tx, unsent), message)?;
    Ok(answer)
}

/// Hands `message` to the task, counted as unsent until the task has handed it to the client
/// ([`Pipeline::unsent`]).
fn send_unsent(
    (tx, unsent): (&mpsc::UnboundedSender<Message>, &AtomicUsize),
    message: Message,
) -> Result<(), NodeError> {
    unsent.fetch_add(1, Ordering::AcqRel);
    tx.send(message).map_err(|_| {
        unsent.fetch_sub(1, Ordering::AcqRel);
        NodeError::Disconnected
    })
}

/// A call to be queued: its keys and arguments, counted as outstanding.
struct Again {
    keys: Vec<Value>,
    args: Vec<Value>,
    counted: Outstanding,
}

/// A call sent by its caller ([`Pipeline::call`]): the `EVALSHA` of a batch of one, handed to
/// the client on the first poll. It answers `Err` with the call when the node answered
/// `NOSCRIPT` (the task then sends it again, by source). A call to be finished
/// ([`Call::finish`]) dropped before its answer is handed to the task, still outstanding,
/// which awaits the answer ([`Message::Adopt`]); any other dropped call stops counting.
struct Direct {
    sent: Option<Answer>,
    /// Where a call to be finished is handed when dropped before its answer (`None` for any
    /// other call).
    adopt: Option<mpsc::UnboundedSender<Message>>,
    script: &'static Script,
    /// The call, kept for a `NOSCRIPT`.
    again: Option<Again>,
}

impl Direct {
    fn start(
        pipeline: &Pipeline,
        script: &'static Script,
        keys: Vec<Value>,
        args: Vec<Value>,
        finish: bool,
        counted: Outstanding,
    ) -> Self {
        let call = [Parts {
            script,
            keys: &keys,
            args: &args,
        }];
        let mut sent = send(pipeline.transport.as_ref(), &call, &[], By::Sha1);
        // The first poll hands the command to the client, now.
        let sent: Answer = match sent.as_mut().now_or_never() {
            Some(done) => Box::pin(std::future::ready(done)),
            None => sent,
        };
        Self {
            sent: Some(sent),
            adopt: finish.then(|| pipeline.tx.clone()),
            script,
            again: Some(Again {
                keys,
                args,
                counted,
            }),
        }
    }
}

impl Future for Direct {
    type Output = Result<Result<Value, NodeError>, Again>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let Some(sent) = self.sent.as_mut() else {
            return Poll::Pending;
        };
        let answer = std::task::ready!(sent.as_mut().poll(cx));
        self.sent = None;
        let again = self.again.take();
        Poll::Ready(match (answer, again) {
            (Err(NodeError::Reply(error)), Some(again)) if no_script(&error) => Err(again),
            (Ok(Value::Array(mut replies)), _) if replies.len() == 1 => {
                Ok(call_reply(replies.pop().unwrap_or(Value::Null)))
            }
            (Ok(other), _) => Ok(Err(NodeError::UnexpectedReply(format!(
                "to a batch: {other:?}"
            )))),
            (Err(error), _) => Ok(Err(error)),
        })
    }
}

impl Drop for Direct {
    fn drop(&mut self) {
        // A call that is not to be finished is sent (handed to the client at the start), and
        // nothing follows its answer.
        let (Some(sent), Some(again), Some(adopt)) =
            (self.sent.take(), self.again.take(), self.adopt.take())
        else {
            return;
        };
        let (reply, _unanswered) = oneshot::channel();
        let call = Call {
            script: self.script,
            keys: again.keys,
            args: again.args,
            finish: true,
            reply,
            _outstanding: again.counted,
        };
        let _adopted = adopt.send(Message::Adopt(call, sent));
    }
}

/// `NOSCRIPT`: the node's script cache does not hold the dispatch script.
fn no_script(error: &ClientError) -> bool {
    error.details().starts_with("NOSCRIPT")
}

/// One call's parts, as a batch sends them.
struct Parts<'c> {
    script: &'static Script,
    keys: &'c [Value],
    args: &'c [Value],
}

impl Parts<'_> {
    /// The call's head in a batch ([`batch_head`]); `None` for a call too large for one,
    /// which is sent alone.
    fn head(&self) -> Option<i64> {
        batch_head(self.script.id, self.keys.len(), self.args.len())
    }
}

impl Call {
    fn parts(&self) -> Parts<'_> {
        Parts {
            script: self.script,
            keys: &self.keys,
            args: &self.args,
        }
    }
}

/// The task: takes the queued calls as one batch whenever it wakes, hands each batch to the
/// client before taking the next, and delivers the replies.
async fn run(
    transport: Arc<dyn Transport>,
    mut rx: mpsc::UnboundedReceiver<Message>,
    unsent: Arc<AtomicUsize>,
) {
    let transport = transport.as_ref();
    let mut in_flight: FuturesUnordered<Sent> = FuturesUnordered::new();
    // While set, the last batch sent is out and younger than `HOLD`: the queue waits for the
    // answers of what is out, or for `hold` to pass.
    let mut holding = false;
    let hold = tokio::time::sleep(Duration::ZERO);
    tokio::pin!(hold);
    loop {
        tokio::select! {
            biased;
            Some((batch, by, result)) = in_flight.next() => {
                settle(transport, &mut in_flight, batch, by, result);
                holding &= !in_flight.is_empty();
            }
            () = &mut hold, if holding => holding = false,
            message = rx.recv(), if !holding => {
                let Some(message) = message else { break };
                let mut batch = Vec::new();
                let mut next = Some(message);
                let mut taken = 0;
                // A batch was cut at `MAX_BATCH`: more calls wait, and are not held.
                let mut cut = false;
                while let Some(message) = next.take() {
                    taken += usize::from(!matches!(message, Message::Adopt(..)));
                    match message {
                        Message::Call(call) => batch.push(call),
                        Message::Adopt(call, answer) => adopt(&mut in_flight, call, answer),
                        Message::Again(call) => {
                            // After the calls queued before it, by source at once: the
                            // node just said it has no script to run it by SHA1.
                            let before = std::mem::take(&mut batch);
                            dispatch(transport, &mut in_flight, before, By::Sha1);
                            dispatch(transport, &mut in_flight, vec![call], By::Source);
                        }
                    }
                    if batch.len() < MAX_BATCH {
                        next = rx.try_recv().ok();
                    } else {
                        cut = true;
                    }
                }
                let sent = !batch.is_empty();
                dispatch(transport, &mut in_flight, batch, By::Sha1);
                // Every call taken is with the client now.
                unsent.fetch_sub(taken, Ordering::AcqRel);
                if sent && !cut && !in_flight.is_empty() {
                    holding = true;
                    hold.as_mut().reset(tokio::time::Instant::now() + HOLD);
                }
            }
        }
    }
    while let Some((batch, by, result)) = in_flight.next().await {
        settle(transport, &mut in_flight, batch, by, result);
    }
}

/// Awaits the answer of `call`, sent by its caller as a batch of one, as the task awaits its
/// own batches ([`Message::Adopt`]).
fn adopt(in_flight: &mut FuturesUnordered<Sent>, call: Call, answer: Answer) {
    in_flight.push(Box::pin(async move {
        let result = answer.await;
        (vec![call], By::Sha1, result)
    }));
}

/// Sends `batch` and hands its command to the client now (the first poll queues it on the
/// connection), so that what is queued after it goes after it.
fn dispatch(
    transport: &dyn Transport,
    in_flight: &mut FuturesUnordered<Sent>,
    batch: Vec<Call>,
    by: By,
) {
    if batch.is_empty() {
        return;
    }
    let parts: Vec<Parts<'_>> = batch.iter().map(Call::parts).collect();
    // A batch of several needs every call's head; one too large for a head (never a call of
    // ours in practice) has every call sent alone, in order.
    let heads: Option<Vec<i64>> = match parts.as_slice() {
        [_] => Some(Vec::new()),
        several => several.iter().map(Parts::head).collect(),
    };
    let Some(heads) = heads else {
        drop(parts);
        for call in batch {
            dispatch(transport, in_flight, vec![call], by);
        }
        return;
    };
    let send = send(transport, &parts, &heads, by);
    drop(parts);
    let mut sent: Sent = Box::pin(async move {
        let result = send.await;
        (batch, by, result)
    });
    match sent.as_mut().now_or_never() {
        Some((batch, by, result)) => settle(transport, in_flight, batch, by, result),
        None => in_flight.push(sent),
    }
}

/// The `EVALSHA` (or `EVAL`) of `batch`, built now. A batch of one is sent in the dispatch
/// script's layout for one call alone (`ARGV` opening with `=<id>`, `scripts/dispatch.lua`),
/// which skips the loop over a batch, and its reply is answered as a batch's (an array of
/// one). Every call goes by the one dispatch script either way, so that a node that lost its
/// script cache answers `NOSCRIPT` to every call until one of them sends it again: calls
/// sent again by source stay in the order they were sent. A batch of several goes with
/// `heads`, each call's head ([`Parts::head`]), in order.
fn send(transport: &dyn Transport, batch: &[Parts<'_>], heads: &[i64], by: By) -> Answer {
    let command = match by {
        By::Sha1 => "EVALSHA",
        By::Source => "EVAL",
    };
    // Made once: a static value is sent without a copy.
    let batch_script: &'static Batch = &BATCH;
    let script = match by {
        By::Sha1 => Value::from_static_str(batch_script.sha1.as_str()),
        By::Source => Value::from_static_str(batch_script.source.as_str()),
    };
    if let [call] = batch {
        let mut all = Vec::with_capacity(3 + call.keys.len() + call.args.len());
        all.push(script);
        all.push(Value::Integer(call.keys.len() as i64));
        all.extend(call.keys.iter().cloned());
        all.push(match batch_script.heads.get(call.script.id) {
            Some(head) => Value::from_static_str(head.as_str()),
            None => Value::from(format!("={}", call.script.id)),
        });
        all.extend(call.args.iter().cloned());
        let answer = transport.send(command, all);
        return Box::pin(answer.map(|reply| reply.map(|reply| Value::Array(vec![reply]))));
    }
    let keys: usize = batch.iter().map(|c| c.keys.len()).sum();
    let args: usize = batch.iter().map(|c| c.args.len()).sum();
    let mut all = Vec::with_capacity(3 + keys + batch.len() + args);
    all.push(script);
    all.push(Value::Integer(keys as i64));
    all.extend(batch.iter().flat_map(|c| c.keys.iter().cloned()));
    all.push(Value::Integer(batch.len() as i64));
    all.extend(heads.iter().map(|head| Value::Integer(*head)));
    all.extend(batch.iter().flat_map(|c| c.args.iter().cloned()));
    transport.send(command, all)
}

/// Delivers a batch's replies, or sends it again: by source after `NOSCRIPT`, call by call
/// when the node refused the whole batch before running it ([`refused_unrun`]: e.g. `NOPERM`
/// for one call's key, which must not fail the others). Any other error goes to every call:
/// some may have run, and running them twice would see their own writes.
fn settle(
    transport: &dyn Transport,
    in_flight: &mut FuturesUnordered<Sent>,
    mut batch: Vec<Call>,
    by: By,
    result: Result<Value, NodeError>,
) {
    match result {
        Ok(Value::Array(replies)) if replies.len() == batch.len() => {
            for (call, reply) in batch.into_iter().zip(replies) {
                let _gone = call.reply.send(call_reply(reply));
            }
        }
        Ok(other) => {
            for call in batch {
                let unexpected = NodeError::UnexpectedReply(format!("to a batch: {other:?}"));
                let _gone = call.reply.send(Err(unexpected));
            }
        }
        Err(NodeError::Reply(error)) if by == By::Sha1 && no_script(&error) => {
            batch.retain(Call::wanted);
            dispatch(transport, in_flight, batch, By::Source);
        }
        Err(NodeError::Reply(error)) if batch.len() > 1 && refused_unrun(error.details()) => {
            for call in batch.into_iter().filter(Call::wanted) {
                dispatch(transport, in_flight, vec![call], by);
            }
        }
        Err(error) => {
            for call in batch {
                let _gone = call.reply.send(Err(error.clone()));
            }
        }
    }
}

/// Error replies with which a node refuses a script before running any of it: an ACL
/// refusal of one of its keys, another script running, a node loading its data set or
/// without a quorum of replicas.
fn refused_unrun(details: &str) -> bool {
    ["NOPERM", "BUSY", "LOADING", "MASTERDOWN", "NOREPLICAS"]
        .iter()
        .any(|code| details.split(' ').next() == Some(code))
}

/// One call's reply in a batch's: `{ERROR_MARKER, text}` is the error it raised, classified
/// as fred classifies an error reply.
fn call_reply(reply: Value) -> Result<Value, NodeError> {
    if let Value::Array(parts) = &reply
        && let [Value::String(marker), text] = parts.as_slice()
        && &**marker == ERROR_MARKER
    {
        let text = text.as_str().map(|t| t.into_owned()).unwrap_or_default();
        return Err(NodeError::error_reply(text));
    }
    Ok(reply)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fred::error::ErrorKind;

    #[test]
    fn only_refusals_before_running_split_a_batch() {
        assert!(refused_unrun(
            "NOPERM this user has no permissions to access one of the keys"
        ));
        assert!(refused_unrun("BUSY Redis is busy running a script."));
        assert!(!refused_unrun(
            "ERR Error running script: OOM command not allowed"
        ));
        assert!(!refused_unrun("NOSCRIPT No matching script."));
        assert!(!refused_unrun("ERR NOPERM-like text"));
    }

    #[test]
    fn a_call_error_keeps_its_text_and_kind() {
        let raised = Value::Array(vec![
            Value::from(ERROR_MARKER),
            Value::from("WRONGTYPE Operation against a key holding the wrong kind of value"),
        ]);
        match call_reply(raised) {
            Err(NodeError::Reply(error)) => {
                assert!(error.details().starts_with("WRONGTYPE"));
                assert_eq!(error.kind(), ErrorKind::InvalidArgument.to_str());
            }
            other => panic!("{other:?}"),
        }
        let plain = Value::Array(vec![Value::Integer(1), Value::from("0")]);
        assert_eq!(call_reply(plain.clone()), Ok(plain));
    }
}
