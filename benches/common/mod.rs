//! Shared pieces of the `compare` and `fairness` benchmarks: one `Spawner` abstraction over rondo,
//! tokio and async-executor, the workloads both benchmarks run, and small helpers.
//!
//! Each bench uses a different subset of this module, hence the `dead_code` allowance.
#![allow(dead_code)]

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use futures::channel::{mpsc, oneshot};
use futures::{SinkExt, StreamExt};

/// Worker threads per runtime: `RONDO_BENCH_WORKERS`, or 2.
pub fn workers() -> usize {
    match std::env::var("RONDO_BENCH_WORKERS") {
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n >= 1 => n,
            _ => panic!("RONDO_BENCH_WORKERS must be a positive integer (got {v:?})"),
        },
        Err(_) => 2,
    }
}

/// The machine's core count as the standard library sees it.
pub fn cores() -> usize {
    thread::available_parallelism().map_or(1, |n| n.get())
}

/// The CPU time the calling thread has burned (Linux's per-thread CPU clock): what a task counts
/// as the work it did, so time the system preempted its worker is not counted.
pub fn thread_cpu() -> Duration {
    #[repr(C)]
    struct Timespec {
        tv_sec: std::ffi::c_long,
        tv_nsec: std::ffi::c_long,
    }
    unsafe extern "C" {
        fn clock_gettime(clock: std::ffi::c_int, tp: *mut Timespec) -> std::ffi::c_int;
    }
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: the C library's `clock_gettime` (clock 3 is `CLOCK_THREAD_CPUTIME_ID` on Linux)
    // writes one `struct timespec`, two `long`s, into `ts`, which is valid for the call.
    let rc = unsafe { clock_gettime(3, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Busy-waits for `d` (CPU work, not a sleep) and returns the time actually spent.
pub fn spin(d: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let e = start.elapsed();
        if e >= d {
            return e;
        }
        std::hint::spin_loop();
    }
}

/// Converts a join handle's `Result<T, E>` into `T`, panicking on error (a benchmark task never
/// fails; if one does, the numbers would be meaningless).
pub struct Joined<J>(J);

impl<T, E: std::fmt::Debug, J: Future<Output = Result<T, E>> + Unpin> Future for Joined<J> {
    type Output = T;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<T> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.expect("benchmark task failed"))
    }
}

/// What a workload needs from a runtime: spawn (joinable or detached) and yield.
///
/// Inside a task, `spawn` must behave like the runtime's own task-local spawn (rondo: into the
/// current worker's queue; tokio: `tokio::spawn`; async-executor: `Executor::spawn`).
pub trait Spawner: Clone + Send + Sync + 'static {
    type Join<T: Send + 'static>: Future<Output = T> + Send + Unpin + 'static;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static;

    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static;

    fn yield_now() -> impl Future<Output = ()> + Send;

    /// Spawns `f` as a task of a group of its own, created for it (and released when the task ends
    /// and its handle is dropped): rondo's group per connection. Runtimes without groups just
    /// spawn it.
    fn spawn_in_new_group<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.spawn(f)
    }
}

/// rondo's free functions: `rondo::spawn` (the current group, or the default group inside
/// `block_on`) and `rondo::yield_now`. Only valid inside a rondo runtime.
#[derive(Clone, Copy)]
pub struct Rondo;

impl Spawner for Rondo {
    type Join<T: Send + 'static> = Joined<rondo::JoinHandle<T>>;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Joined(rondo::spawn(f))
    }

    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(rondo::spawn(f));
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        rondo::yield_now()
    }
}

/// Spawns into one rondo group from anywhere (`Group::spawn`).
#[derive(Clone)]
pub struct RondoGroup(pub rondo::Group);

impl Spawner for RondoGroup {
    type Join<T: Send + 'static> = Joined<rondo::JoinHandle<T>>;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Joined(self.0.spawn(f))
    }

    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(self.0.spawn(f));
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        rondo::yield_now()
    }

    fn spawn_in_new_group<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        let group = rondo::Handle::current()
            .group()
            .build()
            .expect("a group with the default settings");
        Joined(group.spawn(f))
    }
}

/// tokio's free functions: `tokio::spawn` and `tokio::task::yield_now`. Only valid inside a tokio
/// runtime context (a task, `block_on`, or an `enter` guard).
#[derive(Clone, Copy)]
pub struct Tokio;

impl Spawner for Tokio {
    type Join<T: Send + 'static> = Joined<tokio::task::JoinHandle<T>>;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        Joined(tokio::spawn(f))
    }

    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        drop(tokio::spawn(f));
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        tokio::task::yield_now()
    }
}

/// An async-executor `Executor` run by its own threads.
#[derive(Clone, Copy)]
pub struct Ae(pub &'static async_executor::Executor<'static>);

impl Spawner for Ae {
    type Join<T: Send + 'static> = async_executor::Task<T>;

    fn spawn<F>(&self, f: F) -> Self::Join<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.0.spawn(f)
    }

    fn spawn_detached<F>(&self, f: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.0.spawn(f).detach();
    }

    fn yield_now() -> impl Future<Output = ()> + Send {
        YieldNow(false)
    }
}

/// Returns `Pending` once after waking itself: the task goes back to its executor's queue.
pub struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// `n` threads running one async-executor `Executor` until the pool is dropped.
pub struct AePool {
    pub ex: &'static async_executor::Executor<'static>,
    stops: Vec<oneshot::Sender<()>>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl AePool {
    pub fn new(n: usize) -> Self {
        // Leaked so that spawners are plain `&'static` references, like tokio's and rondo's free
        // functions (no reference count per spawn). One small allocation per pool.
        let ex: &'static async_executor::Executor<'static> =
            Box::leak(Box::new(async_executor::Executor::new()));
        let mut stops = Vec::with_capacity(n);
        let mut threads = Vec::with_capacity(n);
        for i in 0..n {
            let (tx, rx) = oneshot::channel::<()>();
            stops.push(tx);
            let t = thread::Builder::new()
                .name(format!("async-executor-{i}"))
                .spawn(move || {
                    futures_lite::future::block_on(ex.run(async {
                        let _ = rx.await;
                    }))
                })
                .expect("cannot start an async-executor thread");
            threads.push(t);
        }
        AePool { ex, stops, threads }
    }

    pub fn spawner(&self) -> Ae {
        Ae(self.ex)
    }

    /// Drives `f` on the calling thread while the pool's threads run the tasks.
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        futures_lite::future::block_on(f)
    }
}

impl Drop for AePool {
    fn drop(&mut self) {
        for s in self.stops.drain(..) {
            let _ = s.send(());
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

pub fn rondo_runtime(workers: usize) -> rondo::Runtime {
    rondo::Runtime::builder()
        .worker_threads(workers)
        .thread_name("rondo-bench")
        .build()
        .expect("cannot build the rondo runtime")
}

pub fn tokio_runtime(workers: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("tokio-bench")
        .build()
        .expect("cannot build the tokio runtime")
}

// ---------------------------------------------------------------------------------------------
// The core workloads (issue 2), generic over the runtime. Each returns the elapsed time of its
// measured part; the caller divides by `ops()`.
// ---------------------------------------------------------------------------------------------

pub const SPAWN_MANY: usize = 10_000;
pub const YIELD_TASKS: usize = 200;
pub const YIELDS_PER_TASK: usize = 1_000;
pub const PING_PONG_PAIRS: usize = 100;
pub const ROUND_TRIPS: usize = 100;
pub const CHAIN_LEN: usize = 1_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    SpawnManyRemote,
    SpawnManyLocal,
    YieldMany,
    PingPong,
    ChainedSpawn,
    SpawnYieldOnce,
}

impl Workload {
    pub const ALL: [Workload; 6] = [
        Workload::SpawnManyRemote,
        Workload::SpawnManyLocal,
        Workload::YieldMany,
        Workload::PingPong,
        Workload::ChainedSpawn,
        Workload::SpawnYieldOnce,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Workload::SpawnManyRemote => "spawn_many_remote",
            Workload::SpawnManyLocal => "spawn_many_local",
            Workload::YieldMany => "yield_many",
            Workload::PingPong => "ping_pong",
            Workload::ChainedSpawn => "chained_spawn",
            Workload::SpawnYieldOnce => "spawn_yield_once",
        }
    }

    /// What one operation is, for the table.
    pub fn unit(self) -> &'static str {
        match self {
            Workload::SpawnManyRemote | Workload::SpawnManyLocal | Workload::SpawnYieldOnce => {
                "task"
            }
            Workload::YieldMany => "yield",
            Workload::PingPong => "round trip",
            Workload::ChainedSpawn => "hop",
        }
    }

    /// Operations per run.
    pub fn ops(self) -> usize {
        match self {
            Workload::SpawnManyRemote | Workload::SpawnManyLocal | Workload::SpawnYieldOnce => {
                SPAWN_MANY
            }
            Workload::YieldMany => YIELD_TASKS * YIELDS_PER_TASK,
            Workload::PingPong => PING_PONG_PAIRS * ROUND_TRIPS,
            Workload::ChainedSpawn => CHAIN_LEN,
        }
    }

    /// Runs the workload once; call it from the runtime's `block_on` (the "remote" thread).
    pub async fn run<S: Spawner>(self, sp: S) -> Duration {
        match self {
            Workload::SpawnManyRemote => spawn_many_remote(sp).await,
            Workload::SpawnManyLocal => spawn_many_local(sp).await,
            Workload::YieldMany => yield_many(sp).await,
            Workload::PingPong => ping_pong(sp).await,
            Workload::ChainedSpawn => chained_spawn(sp).await,
            Workload::SpawnYieldOnce => spawn_yield_once(sp).await,
        }
    }
}

/// 10,000 empty tasks spawned from the `block_on` thread, all awaited.
///
/// The vector of handles is freed after the clock stops: freeing a buffer that large makes glibc
/// consolidate its fastbins, a walk over every small chunk freed just before (the tasks), whose
/// cost depends on each runtime's task size rather than on its scheduling.
pub async fn spawn_many_remote<S: Spawner>(sp: S) -> Duration {
    let start = Instant::now();
    let mut handles: Vec<_> = (0..SPAWN_MANY).map(|_| sp.spawn(async {})).collect();
    for h in handles.drain(..) {
        h.await;
    }
    let elapsed = start.elapsed();
    drop(handles);
    elapsed
}

/// Counts finished tasks; the last one sends the signal.
struct Countdown {
    left: AtomicUsize,
    done: Mutex<Option<oneshot::Sender<()>>>,
}

impl Countdown {
    fn new(n: usize) -> (Arc<Countdown>, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let c = Countdown {
            left: AtomicUsize::new(n),
            done: Mutex::new(Some(tx)),
        };
        (Arc::new(c), rx)
    }

    fn tick(&self) {
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(tx) = self.done.lock().unwrap().take() {
                let _ = tx.send(());
            }
        }
    }
}

/// Spawns `SPAWN_MANY` tasks made by `task` from inside one task; returns when the last of them
/// ticks the countdown it was given.
async fn spawn_many_from_a_task<S, F>(sp: S, task: fn(Arc<Countdown>) -> F) -> Duration
where
    S: Spawner,
    F: Future<Output = ()> + Send + 'static,
{
    let (count, done) = Countdown::new(SPAWN_MANY);
    let start = Instant::now();
    let inner = sp.clone();
    sp.spawn_detached(async move {
        for _ in 0..SPAWN_MANY {
            inner.spawn_detached(task(count.clone()));
        }
    });
    done.await.expect("countdown dropped");
    start.elapsed()
}

/// 10,000 empty tasks spawned from inside one task; the last to finish signals.
pub async fn spawn_many_local<S: Spawner>(sp: S) -> Duration {
    spawn_many_from_a_task(sp, |c| async move { c.tick() }).await
}

/// 10,000 tasks spawned from inside one task, each yielding once before it finishes: the
/// lifecycle of a short task that waits once (a request, a timeout), as opposed to
/// `spawn_many_local`'s tasks, which finish in their first poll.
pub async fn spawn_yield_once<S: Spawner>(sp: S) -> Duration {
    spawn_many_from_a_task(sp, |c| async move {
        S::yield_now().await;
        c.tick()
    })
    .await
}

/// 200 tasks × 1,000 yields, spawned from the `block_on` thread, all awaited.
pub async fn yield_many<S: Spawner>(sp: S) -> Duration {
    let start = Instant::now();
    let handles: Vec<_> = (0..YIELD_TASKS)
        .map(|_| {
            sp.spawn(async {
                for _ in 0..YIELDS_PER_TASK {
                    S::yield_now().await;
                }
            })
        })
        .collect();
    for h in handles {
        h.await;
    }
    start.elapsed()
}

/// 100 pairs × 100 round trips over bounded channels (`futures::channel::mpsc::channel(1)`),
/// the pairs spawned from inside one task.
pub async fn ping_pong<S: Spawner>(sp: S) -> Duration {
    let start = Instant::now();
    let inner = sp.clone();
    let root = sp.spawn(async move {
        let mut pings = Vec::with_capacity(PING_PONG_PAIRS);
        for _ in 0..PING_PONG_PAIRS {
            let (mut to_pong, mut pong_rx) = mpsc::channel::<usize>(1);
            let (mut to_ping, mut ping_rx) = mpsc::channel::<usize>(1);
            inner.spawn_detached(async move {
                while let Some(v) = pong_rx.next().await {
                    if to_ping.send(v).await.is_err() {
                        break;
                    }
                }
            });
            pings.push(inner.spawn(async move {
                for i in 0..ROUND_TRIPS {
                    to_pong.send(i).await.expect("pong gone");
                    let back = ping_rx.next().await.expect("pong gone");
                    assert_eq!(back, i);
                }
            }));
        }
        for p in pings {
            p.await;
        }
    });
    root.await;
    start.elapsed()
}

fn chain_link<S: Spawner>(sp: S, left: usize, done: oneshot::Sender<()>) {
    if left == 0 {
        let _ = done.send(());
        return;
    }
    let next = sp.clone();
    sp.spawn_detached(async move { chain_link(next, left - 1, done) });
}

/// A chain of 1,000 tasks, each spawning the next; the last signals.
pub async fn chained_spawn<S: Spawner>(sp: S) -> Duration {
    let (tx, rx) = oneshot::channel();
    let start = Instant::now();
    chain_link(sp, CHAIN_LEN, tx);
    rx.await.expect("chain broken");
    start.elapsed()
}

// ---------------------------------------------------------------------------------------------
// Formatting
// ---------------------------------------------------------------------------------------------

/// The middle value of `v` (the upper one of the two middles for an even count).
pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Prints a table with a header row, a rule, and left-aligned first / right-aligned other columns.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let cols = header.len();
    let mut width: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(cols) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i] - c.chars().count();
            if i == 0 {
                s.push_str(c);
                s.push_str(&" ".repeat(pad));
            } else {
                s.push_str(" | ");
                s.push_str(&" ".repeat(pad));
                s.push_str(c);
            }
        }
        println!("{}", s.trim_end());
    };
    line(header.to_vec());
    let rule: Vec<String> = width.iter().map(|w| "-".repeat(*w)).collect();
    println!("{}", rule.join("-|-"));
    for r in rows {
        line(r.iter().map(String::as_str).collect());
    }
}

/// Drives a future to completion on the calling thread with the runtime's own `block_on`.
pub trait BlockOn {
    fn run<F: Future>(&self, f: F) -> F::Output;
}

impl BlockOn for rondo::Runtime {
    fn run<F: Future>(&self, f: F) -> F::Output {
        self.block_on(f)
    }
}

impl BlockOn for tokio::runtime::Runtime {
    fn run<F: Future>(&self, f: F) -> F::Output {
        self.block_on(f)
    }
}

impl BlockOn for AePool {
    fn run<F: Future>(&self, f: F) -> F::Output {
        self.block_on(f)
    }
}
