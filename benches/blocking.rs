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
}
