//! rondo's blocking pool and `block_in_place` against tokio's (issue 9, blocking part).
//!
//! Both runtimes get the same number of worker threads (2, or `RONDO_BENCH_WORKERS`) and their
//! default blocking pools (512 threads, 10 s keep-alive). Runs are interleaved: for each workload,
//! round r runs rondo then tokio, then round r + 1, so machine noise hits both alike. Each figure is
//! the best of `ROUNDS` rounds, after one unmeasured warm-up round.
//!
//! - `spawn_blocking round trip`: one task awaits `spawn_blocking(|| ())` `ROUND_TRIPS` times.
//! - `block_in_place`: one task calls `block_in_place(|| ())` `IN_PLACE_CALLS` times.
//! - `spawn_blocking from N threads`: N plain threads each call `spawn_blocking(|| ())`
//!   `SPAWNS_PER_THREAD` times at once (the handles are awaited after the clock stops); the figure
//!   is wall time divided by all spawns. With one thread it is the uncontended cost, and the ratio
//!   of the two shows how spawning scales under contention (tokio's pool lock made it 18× worse
//!   with 16 threads, its issue #7757).
//!
//! Run with `cargo bench --bench blocking`.

mod common;

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
    Spawners(usize),
}

impl Workload {
    fn name(self) -> String {
        match self {
            Workload::RoundTrip => "spawn_blocking(|| ()).await round trip".to_string(),
            Workload::InPlace => "block_in_place(|| ()) per call".to_string(),
            Workload::Spawners(n) => format!("spawn_blocking from {n} threads, per spawn"),
        }
    }

    fn ops(self) -> usize {
        match self {
            Workload::RoundTrip => ROUND_TRIPS,
            Workload::InPlace => IN_PLACE_CALLS,
            Workload::Spawners(n) => n * SPAWNS_PER_THREAD,
        }
    }
}

fn rondo_run(rt: &rondo::Runtime, w: Workload) -> Duration {
    match w {
        Workload::RoundTrip => rt.block_on(async {
            rondo::spawn(async {
                let t = Instant::now();
                for _ in 0..ROUND_TRIPS {
                    rondo::spawn_blocking(|| ()).await.unwrap();
                }
                t.elapsed()
            })
            .await
            .unwrap()
        }),
        Workload::InPlace => rt.block_on(async {
            rondo::spawn(async {
                let t = Instant::now();
                for _ in 0..IN_PLACE_CALLS {
                    rondo::block_in_place(|| std::hint::black_box(()));
                }
                t.elapsed()
            })
            .await
            .unwrap()
        }),
        Workload::Spawners(n) => {
            let h = rt.handle().clone();
            spawners(n, move || {
                let h = h.clone();
                let handles: Vec<_> = (0..SPAWNS_PER_THREAD)
                    .map(|_| h.spawn_blocking(|| ()))
                    .collect();
                move || {
                    for j in handles {
                        h.block_on(j).unwrap();
                    }
                }
            })
        }
    }
}

fn tokio_run(rt: &tokio::runtime::Runtime, w: Workload) -> Duration {
    match w {
        Workload::RoundTrip => rt.block_on(async {
            tokio::spawn(async {
                let t = Instant::now();
                for _ in 0..ROUND_TRIPS {
                    tokio::task::spawn_blocking(|| ()).await.unwrap();
                }
                t.elapsed()
            })
            .await
            .unwrap()
        }),
        Workload::InPlace => rt.block_on(async {
            tokio::spawn(async {
                let t = Instant::now();
                for _ in 0..IN_PLACE_CALLS {
                    tokio::task::block_in_place(|| std::hint::black_box(()));
                }
                t.elapsed()
            })
            .await
            .unwrap()
        }),
        Workload::Spawners(n) => {
            let h = rt.handle().clone();
            spawners(n, move || {
                let h = h.clone();
                let handles: Vec<_> = (0..SPAWNS_PER_THREAD)
                    .map(|_| h.spawn_blocking(|| ()))
                    .collect();
                move || {
                    for j in handles {
                        h.block_on(j).unwrap();
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
    let started = Instant::now();
    let mut rows = Vec::new();
    let mut per_spawn = [[0.0f64; 2]; 2];
    let workloads = [
        Workload::RoundTrip,
        Workload::InPlace,
        Workload::Spawners(1),
        Workload::Spawners(16),
    ];
    for (wi, w) in workloads.into_iter().enumerate() {
        let mut best = [f64::INFINITY; 2];
        for round in 0..=ROUNDS {
            let r = rondo_run(&rondo_rt, w).as_nanos() as f64 / w.ops() as f64;
            let t = tokio_run(&tokio_rt, w).as_nanos() as f64 / w.ops() as f64;
            // Round 0 warms the pools up (threads started, allocators); it is not counted.
            if round > 0 {
                best[0] = best[0].min(r);
                best[1] = best[1].min(t);
            }
        }
        if wi >= 2 {
            per_spawn[wi - 2] = best;
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
        "{ROUND_TRIPS} round trips, {IN_PLACE_CALLS} block_in_place calls, {SPAWNS_PER_THREAD} \
         spawns per spawning thread; total time {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Starvation rescue (its own table; see `stall_rescue`).
    stall_rescue();
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
/// Then waits for the sleepers, so rounds do not overlap.
fn stall_round_rondo(rt: &rondo::Runtime, sleepers: usize) -> Duration {
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

fn stall_round_tokio(rt: &tokio::runtime::Runtime, sleepers: usize) -> Duration {
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
