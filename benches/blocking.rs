//! rondo's blocking pool and `block_in_place` against tokio's (issue 9, blocking part).
//!
//! Both runtimes get the same number of worker threads (2, or `RONDO_BENCH_WORKERS`) and their
//! default blocking pools (512 threads, 10 s keep-alive). Runs are interleaved: for each workload,
//! round r runs rondo then tokio, then round r + 1, so machine noise hits both alike. Each figure is
//! the median of `ROUNDS` rounds, after one unmeasured warm-up round (the median, not the best: on
//! a shared machine the pools' figures are bimodal, depending on whether the pool threads got a
//! core during the round, and the best round picks the lucky mode).
//!
//! - `spawn_blocking round trip`: one task awaits `spawn_blocking(|| ())` `ROUND_TRIPS` times.
//! - `block_in_place, one call per poll`: one task calls `block_in_place(|| ())` and yields,
//!   `IN_PLACE_CALLS` times; the figure is wall time per call (the yield included). Each call finds
//!   the task's worker holding its core, so each one hands the core over and takes it back (or
//!   loses it to the thread that took it): the cost of `block_in_place` as a task sees it.
//! - `block_in_place, second call in the same poll`: the same loop with a second call right after
//!   the first; only the second call is timed (two clock reads included). The first call has handed
//!   the core over, so the second has nothing to hand over.
//! - `spawn_blocking from N threads`: N plain threads each call `spawn_blocking(|| ())`
//!   `SPAWNS_PER_THREAD` times at once (the handles are awaited after the clock stops); the figure
//!   is wall time divided by all spawns. With one thread it is the uncontended cost, and the ratio
//!   of the two shows how spawning scales under contention (tokio's pool lock made it 18× worse
//!   with 16 threads, its issue #7757). Each spawning thread reads the clock itself.
//! - `spawn_blocking from 16 threads, until all ran`: the same, timed until every closure has run
//!   and its handle resolved: the spawn figure alone would flatter a pool that defers the work.
//!
//! - `blocking share` (its own table): two equal-weight groups for `SHARE_RUN`: A runs 8, 32 or 128
//!   loops of `spawn_blocking(spin 1 ms of CPU).await`, B a CPU-bound task per worker (spin 100 µs
//!   of CPU, yield). Every task counts the thread CPU time it burned; the row gives A's share of
//!   the CPU both burned (target 50 ± 10%) and each group's `busy` ÷ its counted CPU time (target
//!   within 10%). tokio has no groups: its row runs the same tasks and gives the blocking pool's
//!   share of the CPU against its workers'.
//!
//! Run with `cargo bench --bench blocking` (`RONDO_BENCH_ONLY=share`: the share table alone).

mod common;

use std::future::Future;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{cores, median, print_table, thread_cpu, workers};

const ROUNDS: usize = 9;
const ROUND_TRIPS: usize = 2_000;
const IN_PLACE_CALLS: usize = 2_000;
const SPAWNS_PER_THREAD: usize = 2_000;
const SPAWNERS: usize = 16;

#[derive(Clone, Copy)]
enum Workload {
    RoundTrip,
    InPlace,
    InPlaceSecond,
    Spawners(usize),
    /// 16 spawning threads, timed until every closure has run.
    SpawnAndRun,
}

impl Workload {
    fn name(self) -> String {
        match self {
            Workload::RoundTrip => "spawn_blocking(|| ()).await round trip".to_string(),
            Workload::InPlace => "block_in_place(|| ()), one call per poll".to_string(),
            Workload::InPlaceSecond => "block_in_place(|| ()), second call in a poll".to_string(),
            Workload::Spawners(n) => format!("spawn_blocking from {n} threads, per spawn"),
            Workload::SpawnAndRun => {
                format!("spawn_blocking from {SPAWNERS} threads, until all ran, per closure")
            }
        }
    }

    fn ops(self) -> usize {
        match self {
            Workload::RoundTrip => ROUND_TRIPS,
            Workload::InPlace | Workload::InPlaceSecond => IN_PLACE_CALLS,
            Workload::Spawners(n) => n * SPAWNS_PER_THREAD,
            Workload::SpawnAndRun => SPAWNERS * SPAWNS_PER_THREAD,
        }
    }
}

/// What the workloads need from a runtime, through its handle.
trait Blocking: Clone + Send + Sync + 'static {
    /// Runs `f` as a task of the runtime and waits for its output on this thread.
    fn in_task<F>(&self, f: F) -> F::Output
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static;
    /// Waits for `f` on this thread.
    fn wait<F: Future>(&self, f: F) -> F::Output;
    type Join: Future<Output = Result<(), Self::Error>> + Send + 'static;
    type Error: std::fmt::Debug;
    /// Spawns `|| ()` on the blocking pool.
    fn spawn_unit(&self) -> Self::Join;
    fn block_in_place<R>(f: impl FnOnce() -> R) -> R;
    fn yield_now() -> impl Future<Output = ()> + Send;
}

/// The two handles have the same method names; only the paths of the free functions differ.
macro_rules! impl_blocking {
    ($handle:ty, $join:ty, $error:ty, $block_in_place:path, $yield_now:path) => {
        impl Blocking for $handle {
            type Join = $join;
            type Error = $error;
            fn in_task<F>(&self, f: F) -> F::Output
            where
                F: Future + Send + 'static,
                F::Output: Send + 'static,
            {
                self.block_on(self.spawn(f)).unwrap()
            }
            fn wait<F: Future>(&self, f: F) -> F::Output {
                self.block_on(f)
            }
            fn spawn_unit(&self) -> Self::Join {
                self.spawn_blocking(|| ())
            }
            fn block_in_place<R>(f: impl FnOnce() -> R) -> R {
                $block_in_place(f)
            }
            fn yield_now() -> impl Future<Output = ()> + Send {
                $yield_now()
            }
        }
    };
}

impl_blocking!(
    rondo::Handle,
    rondo::JoinHandle<()>,
    rondo::JoinError,
    rondo::block_in_place,
    rondo::yield_now
);
impl_blocking!(
    tokio::runtime::Handle,
    tokio::task::JoinHandle<()>,
    tokio::task::JoinError,
    tokio::task::block_in_place,
    tokio::task::yield_now
);

fn run<H: Blocking>(h: &H, w: Workload) -> Duration {
    match w {
        Workload::RoundTrip => {
            let h2 = h.clone();
            h.in_task(async move {
                let t = Instant::now();
                for _ in 0..ROUND_TRIPS {
                    h2.spawn_unit().await.unwrap();
                }
                t.elapsed()
            })
        }
        Workload::InPlace => h.in_task(async {
            let t = Instant::now();
            for _ in 0..IN_PLACE_CALLS {
                H::block_in_place(|| std::hint::black_box(()));
                H::yield_now().await;
            }
            t.elapsed()
        }),
        Workload::InPlaceSecond => h.in_task(async {
            let mut second = Duration::ZERO;
            for _ in 0..IN_PLACE_CALLS {
                H::block_in_place(|| std::hint::black_box(()));
                let t = Instant::now();
                H::block_in_place(|| std::hint::black_box(()));
                second += t.elapsed();
                H::yield_now().await;
            }
            second
        }),
        Workload::Spawners(n) => spawners(h, n).0,
        Workload::SpawnAndRun => spawners(h, SPAWNERS).1,
    }
}

/// Starts `n` threads that each spawn `SPAWNS_PER_THREAD` closures `|| ()` at the same moment, then
/// wait for them. Returns the wall time from the first thread's start to the last one's end of
/// spawning, and to the last one's end of waiting. Each thread reads the clock itself, so a
/// spawner that runs before the others is timed too.
fn spawners<H: Blocking>(h: &H, n: usize) -> (Duration, Duration) {
    let start = Arc::new(Barrier::new(n));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (h, start) = (h.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                let t0 = Instant::now();
                let handles: Vec<_> = (0..SPAWNS_PER_THREAD).map(|_| h.spawn_unit()).collect();
                let t1 = Instant::now();
                for j in handles {
                    h.wait(j).unwrap();
                }
                (t0, t1, Instant::now())
            })
        })
        .collect();
    let times: Vec<_> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let first = times.iter().map(|t| t.0).min().unwrap();
    let spawned = times.iter().map(|t| t.1).max().unwrap();
    let ran = times.iter().map(|t| t.2).max().unwrap();
    (spawned - first, ran - first)
}

fn main() {
    let n = workers();
    println!(
        "rondo vs tokio, blocking: {n} worker threads each, {} cores available, median of \
         {ROUNDS} interleaved rounds",
        cores()
    );
    let rondo_rt = common::rondo_runtime(n);
    let tokio_rt = common::tokio_runtime(n);
    let (rondo_h, tokio_h) = (rondo_rt.handle().clone(), tokio_rt.handle().clone());
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut per_spawn = [[f64::NAN; 2]; 2];
    let workloads = [
        Workload::RoundTrip,
        Workload::InPlace,
        Workload::InPlaceSecond,
        Workload::Spawners(1),
        Workload::Spawners(SPAWNERS),
        Workload::SpawnAndRun,
    ];
    // `RONDO_BENCH_ONLY=word`: only the workloads whose name contains `word` (while profiling).
    let only = std::env::var("RONDO_BENCH_ONLY").unwrap_or_default();
    for w in workloads {
        if !w.name().contains(only.as_str()) {
            continue;
        }
        let mut figures = [Vec::new(), Vec::new()];
        for round in 0..=ROUNDS {
            let r = run(&rondo_h, w).as_nanos() as f64 / w.ops() as f64;
            let t = run(&tokio_h, w).as_nanos() as f64 / w.ops() as f64;
            // Round 0 warms the pools up (threads started, allocators); it is not counted.
            if round > 0 {
                figures[0].push(r);
                figures[1].push(t);
            }
        }
        let med = figures.map(|v| median(&v));
        match w {
            Workload::Spawners(1) => per_spawn[0] = med,
            Workload::Spawners(_) => per_spawn[1] = med,
            _ => {}
        }
        rows.push(vec![
            format!("{} (ns)", w.name()),
            format!("{:.0}", med[0]),
            format!("{:.0}", med[1]),
            format!("{:.2}", med[0] / med[1]),
        ]);
    }
    println!();
    print_table(&["workload", "rondo", "tokio", "rondo ÷ tokio"], &rows);
    println!();
    println!(
        "16 spawning threads ÷ 1, per spawn: rondo {:.2}×, tokio {:.2}×",
        per_spawn[1][0] / per_spawn[0][0],
        per_spawn[1][1] / per_spawn[0][1]
    );
    println!(
        "{ROUND_TRIPS} round trips, {IN_PLACE_CALLS} polls calling block_in_place, \
         {SPAWNS_PER_THREAD} spawns per spawning thread; total time {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Starvation rescue (its own table; see `stall_rescue`).
    if "stall rescue".contains(only.as_str()) {
        stall_rescue();
    }

    // The blocking share (its own table; see `blocking_share`).
    if "blocking share".contains(only.as_str()) {
        blocking_share(n);
    }
}

// ---------------------------------------------------------------------------------------------
// Starvation rescue (issue 9, table (a)): 2 workers, 4 tasks each calling
// `std::thread::sleep(200 ms)`, while 10,000 small tasks are spawned from outside: the time from
// the first spawn until the last small task is done. rondo's stall monitor hands a blocked
// worker's queues to another thread after `stall_threshold`; tokio waits for the sleeps. The
// target for rondo is at most `stall_threshold` plus twice the small tasks' own time (the same
// batch on an idle runtime).
// ---------------------------------------------------------------------------------------------

const STALL_SLEEPERS: usize = 4;
const STALL_SLEEP: Duration = Duration::from_millis(200);
const STALL_SMALL_TASKS: usize = 10_000;
const STALL_ROUNDS: usize = 3;

/// A small task's work: a little arithmetic the optimiser cannot drop.
fn small_work(i: usize) -> usize {
    (0..50).fold(i, |a, b| a.wrapping_mul(31).wrapping_add(b))
}

/// Spawns the sleepers, waits until both workers are blocked in one, then spawns and awaits the
/// small tasks; returns the time from the first small spawn to the last small task's completion.
/// Then waits for the sleepers, so rounds do not overlap. Written once, expanded for each
/// runtime's type (both have `spawn` and `block_on` of the same shape).
macro_rules! stall_round {
    ($name:ident, $rt:ty) => {
        fn $name(rt: &$rt, sleepers: usize) -> Duration {
            let started = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let sleeping: Vec<_> = (0..sleepers)
                .map(|_| {
                    let started = started.clone();
                    rt.spawn(async move {
                        started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        std::thread::sleep(STALL_SLEEP);
                    })
                })
                .collect();
            while started.load(std::sync::atomic::Ordering::SeqCst) < sleepers.min(2) {
                std::thread::yield_now();
            }
            let t = Instant::now();
            let small: Vec<_> = (0..STALL_SMALL_TASKS)
                .map(|i| rt.spawn(async move { small_work(i) }))
                .collect();
            let sum = rt.block_on(async {
                let mut sum = 0usize;
                for h in small {
                    sum = sum.wrapping_add(h.await.unwrap());
                }
                sum
            });
            let took = t.elapsed();
            std::hint::black_box(sum);
            for h in sleeping {
                rt.block_on(h).unwrap();
            }
            took
        }
    };
}

stall_round!(stall_round_rondo, rondo::Runtime);
stall_round!(stall_round_tokio, tokio::runtime::Runtime);

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

/// Table (a): see the section comment.
fn stall_rescue() {
    let fast = Duration::from_millis(1);
    let thresholds = [rondo::runtime::DEFAULT_STALL_THRESHOLD, fast];
    let rondo_rts: Vec<rondo::Runtime> = thresholds
        .iter()
        .map(|&t| {
            rondo::Runtime::builder()
                .worker_threads(2)
                .stall_threshold(t)
                .build()
                .unwrap()
        })
        .collect();
    let tokio_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let mut alone = Duration::MAX;
    // best and worst per runtime: the rondo runtimes, then tokio.
    let mut best = [Duration::MAX; 3];
    let mut worst = [Duration::ZERO; 3];
    // Round 0 warms up (threads, allocators) and is not counted.
    for round in 0..=STALL_ROUNDS {
        let a = stall_round_rondo(&rondo_rts[0], 0);
        let mut took = [Duration::ZERO; 3];
        for (i, rt) in rondo_rts.iter().enumerate() {
            took[i] = stall_round_rondo(rt, STALL_SLEEPERS);
        }
        took[2] = stall_round_tokio(&tokio_rt, STALL_SLEEPERS);
        if round > 0 {
            alone = alone.min(a);
            for i in 0..3 {
                best[i] = best[i].min(took[i]);
                worst[i] = worst[i].max(took[i]);
            }
        }
    }
    println!();
    println!(
        "Starvation rescue: 2 workers, {STALL_SLEEPERS} tasks sleeping {} ms in std::thread::sleep, \
         {STALL_SMALL_TASKS} small tasks spawned meanwhile; best (worst) of {STALL_ROUNDS} rounds; \
         the small tasks alone take {} ms",
        STALL_SLEEP.as_millis(),
        ms(alone)
    );
    let mut rows = Vec::new();
    for (i, rt) in rondo_rts.iter().enumerate() {
        let t = thresholds[i];
        rows.push(vec![
            format!("rondo, stall_threshold {} ms", ms(t)),
            format!("{} ({})", ms(best[i]), ms(worst[i])),
            format!("≤ {}", ms(t + 2 * alone)),
            rt.metrics().rescues.to_string(),
        ]);
    }
    rows.push(vec![
        "tokio".to_string(),
        format!("{} ({})", ms(best[2]), ms(worst[2])),
        "-".to_string(),
        "-".to_string(),
    ]);
    print_table(
        &[
            "runtime",
            "small tasks done after (ms)",
            "target: threshold + 2 × alone",
            "rescues",
        ],
        &rows,
    );
}

// ---------------------------------------------------------------------------------------------
// The blocking share (issue 52): see the module docs.
// ---------------------------------------------------------------------------------------------

const SHARE_RUN: Duration = Duration::from_secs(2);
const SHARE_LOOPS: [usize; 3] = [8, 32, 128];

/// Spins until this thread has burned `d` of CPU time; returns what it burned, in nanoseconds.
fn spin_cpu(d: Duration) -> u64 {
    let start = thread_cpu();
    loop {
        let burned = thread_cpu() - start;
        if burned >= d {
            return burned.as_nanos() as u64;
        }
        std::hint::spin_loop();
    }
}

/// A's and B's counted CPU time, in nanoseconds.
type Counted = (
    Arc<std::sync::atomic::AtomicU64>,
    Arc<std::sync::atomic::AtomicU64>,
);

fn counted() -> Counted {
    Default::default()
}

fn load(c: &std::sync::atomic::AtomicU64) -> u64 {
    c.load(std::sync::atomic::Ordering::Relaxed)
}

fn add(c: &std::sync::atomic::AtomicU64, ns: u64) {
    c.fetch_add(ns, std::sync::atomic::Ordering::Relaxed);
}

/// rondo: returns (A's CPU, B's CPU, A's busy, B's busy) in nanoseconds.
fn share_rondo(workers: usize, loops: usize) -> [u64; 4] {
    let rt = common::rondo_runtime(workers);
    let a = rt.group().name("A").build().unwrap();
    let b = rt.group().name("B").build().unwrap();
    let (a_cpu, b_cpu) = counted();
    let end = Instant::now() + SHARE_RUN;
    let mut handles = Vec::new();
    for _ in 0..loops {
        let a_cpu = a_cpu.clone();
        handles.push(a.spawn(async move {
            while Instant::now() < end {
                let ns = rondo::spawn_blocking(|| spin_cpu(Duration::from_millis(1)))
                    .await
                    .unwrap();
                add(&a_cpu, ns);
            }
        }));
    }
    for _ in 0..workers {
        let b_cpu = b_cpu.clone();
        handles.push(b.spawn(async move {
            while Instant::now() < end {
                add(&b_cpu, spin_cpu(Duration::from_micros(100)));
                rondo::yield_now().await;
            }
        }));
    }
    rt.block_on(async {
        for h in handles {
            h.await.unwrap();
        }
        // The workers flush their last charges as they park.
        rondo::time::sleep(Duration::from_millis(50)).await;
    });
    [
        load(&a_cpu),
        load(&b_cpu),
        a.metrics().busy.as_nanos() as u64,
        b.metrics().busy.as_nanos() as u64,
    ]
}

/// tokio, the same tasks: returns (A's CPU, B's CPU) in nanoseconds.
fn share_tokio(workers: usize, loops: usize) -> [u64; 2] {
    let rt = common::tokio_runtime(workers);
    let (a_cpu, b_cpu) = counted();
    let end = Instant::now() + SHARE_RUN;
    let mut handles = Vec::new();
    for _ in 0..loops {
        let a_cpu = a_cpu.clone();
        handles.push(rt.spawn(async move {
            while Instant::now() < end {
                let ns = tokio::task::spawn_blocking(|| spin_cpu(Duration::from_millis(1)))
                    .await
                    .unwrap();
                add(&a_cpu, ns);
            }
        }));
    }
    for _ in 0..workers {
        let b_cpu = b_cpu.clone();
        handles.push(rt.spawn(async move {
            while Instant::now() < end {
                add(&b_cpu, spin_cpu(Duration::from_micros(100)));
                tokio::task::yield_now().await;
            }
        }));
    }
    rt.block_on(async {
        for h in handles {
            h.await.unwrap();
        }
    });
    [load(&a_cpu), load(&b_cpu)]
}

fn pct(part: u64, whole: u64) -> String {
    format!("{:.0}%", part as f64 * 100.0 / whole.max(1) as f64)
}

/// The blocking share table: see the module docs.
fn blocking_share(workers: usize) {
    let mut rows = Vec::new();
    for loops in SHARE_LOOPS {
        let [a, b, a_busy, b_busy] = share_rondo(workers, loops);
        let [ta, tb] = share_tokio(workers, loops);
        rows.push(vec![
            format!("{loops}"),
            pct(a, a + b),
            pct(a_busy, a),
            pct(b_busy, b),
            format!("{:.2}", (a + b) as f64 / 1e9),
            pct(ta, ta + tb),
            format!("{:.2}", (ta + tb) as f64 / 1e9),
        ]);
    }
    println!();
    println!(
        "blocking share: {workers} workers, {} s per run; A: blocking loops, B: one CPU-bound task \
         per worker, equal weights",
        SHARE_RUN.as_secs()
    );
    print_table(
        &[
            "A's loops",
            "rondo: A's share",
            "A busy ÷ CPU",
            "B busy ÷ CPU",
            "CPU s",
            "tokio: pool's share",
            "CPU s",
        ],
        &rows,
    );
}
