//! rondo's blocking pool and `block_in_place` against tokio's (issue 9, blocking part).
//!
//! Both runtimes get the same number of worker threads (2, or `RONDO_BENCH_WORKERS`) and their
//! default blocking pools (512 threads, 10 s keep-alive). Runs are interleaved: for each workload,
//! round r runs rondo then tokio, then round r + 1, so machine noise hits both alike. Each figure is
//! the best of `ROUNDS` rounds, after one unmeasured warm-up round.
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
//!   with 16 threads, its issue #7757).
//!
//! Run with `cargo bench --bench blocking`.

mod common;

use std::future::Future;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::{cores, print_table, workers};

const ROUNDS: usize = 7;
const ROUND_TRIPS: usize = 2_000;
const IN_PLACE_CALLS: usize = 2_000;
const SPAWNS_PER_THREAD: usize = 2_000;

#[derive(Clone, Copy)]
enum Workload {
    RoundTrip,
    InPlace,
    InPlaceSecond,
    Spawners(usize),
}

impl Workload {
    fn name(self) -> String {
        match self {
            Workload::RoundTrip => "spawn_blocking(|| ()).await round trip".to_string(),
            Workload::InPlace => "block_in_place(|| ()), one call per poll".to_string(),
            Workload::InPlaceSecond => "block_in_place(|| ()), second call in a poll".to_string(),
            Workload::Spawners(n) => format!("spawn_blocking from {n} threads, per spawn"),
        }
    }

    fn ops(self) -> usize {
        match self {
            Workload::RoundTrip => ROUND_TRIPS,
            Workload::InPlace | Workload::InPlaceSecond => IN_PLACE_CALLS,
            Workload::Spawners(n) => n * SPAWNS_PER_THREAD,
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

impl Blocking for rondo::Handle {
    type Join = rondo::JoinHandle<()>;
    type Error = rondo::JoinError;
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
        rondo::block_in_place(f)
    }
    fn yield_now() -> impl Future<Output = ()> + Send {
        rondo::yield_now()
    }
}

impl Blocking for tokio::runtime::Handle {
    type Join = tokio::task::JoinHandle<()>;
    type Error = tokio::task::JoinError;
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
        tokio::task::block_in_place(f)
    }
    fn yield_now() -> impl Future<Output = ()> + Send {
        tokio::task::yield_now()
    }
}

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
        Workload::Spawners(n) => {
            let h = h.clone();
            spawners(n, move || {
                let h = h.clone();
                let handles: Vec<_> = (0..SPAWNS_PER_THREAD).map(|_| h.spawn_unit()).collect();
                move || {
                    for j in handles {
                        h.wait(j).unwrap();
                    }
                }
            })
        }
    }
}

/// Starts `n` threads that each run `spawn` at the same moment; returns the wall time until the
/// last one finished spawning. What `spawn` returns (awaiting the handles) runs after the clock
/// stops.
fn spawners<S, W>(n: usize, spawn: S) -> Duration
where
    S: Fn() -> W + Clone + Send + 'static,
    W: FnOnce(),
{
    let start = Arc::new(Barrier::new(n + 1));
    let done = Arc::new(Barrier::new(n + 1));
    let threads: Vec<_> = (0..n)
        .map(|_| {
            let (start, done, spawn) = (start.clone(), done.clone(), spawn.clone());
            std::thread::spawn(move || {
                start.wait();
                let wait = spawn();
                done.wait();
                wait();
            })
        })
        .collect();
    start.wait();
    let t = Instant::now();
    done.wait();
    let took = t.elapsed();
    for t in threads {
        t.join().unwrap();
    }
    took
}

fn main() {
    let n = workers();
    println!(
        "rondo vs tokio, blocking: {n} worker threads each, {} cores available, best of {ROUNDS} \
         interleaved rounds",
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
        Workload::Spawners(16),
    ];
    // `RONDO_BENCH_ONLY=word`: only the workloads whose name contains `word` (while profiling).
    let only = std::env::var("RONDO_BENCH_ONLY").unwrap_or_default();
    for w in workloads {
        if !w.name().contains(only.as_str()) {
            continue;
        }
        let mut best = [f64::INFINITY; 2];
        for round in 0..=ROUNDS {
            let r = run(&rondo_h, w).as_nanos() as f64 / w.ops() as f64;
            let t = run(&tokio_h, w).as_nanos() as f64 / w.ops() as f64;
            // Round 0 warms the pools up (threads started, allocators); it is not counted.
            if round > 0 {
                best[0] = best[0].min(r);
                best[1] = best[1].min(t);
            }
        }
        match w {
            Workload::Spawners(1) => per_spawn[0] = best,
            Workload::Spawners(_) => per_spawn[1] = best,
            _ => {}
        }
        rows.push(vec![
            format!("{} (ns)", w.name()),
            format!("{:.0}", best[0]),
            format!("{:.0}", best[1]),
            format!("{:.2}", best[0] / best[1]),
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
}
