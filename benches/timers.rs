//! rondo's timers against tokio's (issue 9, timer part).
//!
//! Both runtimes get the same number of worker threads (2, or `RONDO_BENCH_WORKERS`). Runs are
//! interleaved: round r runs rondo then tokio, then round r + 1, so machine noise hits both alike.
//!
//! - `lateness`: 100,000 tasks each sleep until a deadline 1–100 ms (random) after a common base
//!   instant, set far enough ahead that all of them are armed before the first is due, and record
//!   how late they woke; p50, p99 and max over all of them (the median round's), and the CPU time
//!   the process used meanwhile (every thread's, from `/proc/self/task/*/schedstat`).
//! - `idle`: 10,000 tasks sleep for ten minutes; the CPU time the idle runtime uses in one second.
//! - `arm + cancel`: on one task, with N timers already live on the same worker, arm a timer
//!   (create it and poll it once) and drop it, for N = 1,000, 100,000 and 1,000,000. `arm` and
//!   `cancel` split the cost: arm 10,000 boxed timers, then drop them (the boxes, not the vector
//!   that holds them: see `arm_cancel`), after a warm-up arming of the same batch off the clock,
//!   so neither runtime's timed loop first-touches memory for its entries. Best of the rounds.
//!
//! Run with `cargo bench --bench timers`.

mod common;

use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Context;
use std::time::{Duration, Instant};

use common::{cores, print_table, workers};

const ROUNDS: usize = 3;
const SLEEPERS: usize = 100_000;
const IDLE_TIMERS: usize = 10_000;
const ARMS: usize = 10_000;
/// The deadlines start this long after the spawning starts, so every sleep is armed before the
/// first one is due: the figure is the timers' lateness, not the queueing of 100,000 first polls.
const SPAWN_MARGIN: Duration = Duration::from_millis(400);

#[derive(Clone, Copy, PartialEq)]
enum Which {
    Rondo,
    Tokio,
}

/// CPU time used so far by every live thread of this process.
fn cpu_time() -> Duration {
    let mut ns = 0u64;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for t in dir.flatten() {
            if let Ok(s) = std::fs::read_to_string(t.path().join("schedstat")) {
                ns += s
                    .split_whitespace()
                    .next()
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(0);
            }
        }
    }
    Duration::from_nanos(ns)
}

/// A small deterministic generator, so both runtimes get the same deadlines.
fn deadlines(n: usize) -> Vec<Duration> {
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            Duration::from_micros(1_000 + x % 99_000)
        })
        .collect()
}

struct Lateness {
    p50: Duration,
    p99: Duration,
    max: Duration,
    cpu: Duration,
}

/// The workloads, written once and expanded for each runtime: how it is built, how a task is
/// spawned on it, and how a task sleeps until an instant.
macro_rules! timer_workloads {
    ($name:ident, $build:expr, $spawn:path, $sleep_until:expr) => {
        mod $name {
            use super::*;

            /// Runs the lateness workload; returns the CPU time it took.
            pub fn lateness(ds: &Arc<Vec<Duration>>, late: &Arc<Vec<AtomicU64>>) -> Duration {
                let rt = $build;
                let before = cpu_time();
                let (ds, late) = (ds.clone(), late.clone());
                rt.block_on(async move {
                    let base = Instant::now() + SPAWN_MARGIN;
                    let hs: Vec<_> = (0..ds.len())
                        .map(|i| {
                            let deadline = base + ds[i];
                            let late = late.clone();
                            $spawn(async move {
                                ($sleep_until)(deadline).await;
                                let l = Instant::now().saturating_duration_since(deadline);
                                late[i].store(l.as_nanos() as u64, Ordering::Relaxed);
                            })
                        })
                        .collect();
                    for h in hs {
                        h.await.unwrap();
                    }
                });
                cpu_time().saturating_sub(before)
            }

            /// CPU time an idle runtime holding `IDLE_TIMERS` ten-minute timers uses in 1 s.
            pub fn idle_cpu() -> Duration {
                let rt = $build;
                rt.block_on(async {
                    let long = Instant::now() + Duration::from_secs(600);
                    for i in 0..IDLE_TIMERS {
                        $spawn(($sleep_until)(long + Duration::from_millis(i as u64)));
                    }
                });
                std::thread::sleep(Duration::from_millis(100));
                let before = cpu_time();
                std::thread::sleep(Duration::from_secs(1));
                cpu_time().saturating_sub(before)
            }

            /// See `arm_cancel`, on one task of this runtime.
            pub fn arm_cancel_run(live: usize) -> [f64; 3] {
                let rt = $build;
                rt.block_on(async { $spawn(arm_cancel(live, $sleep_until)).await.unwrap() })
            }
        }
    };
}

timer_workloads!(
    on_rondo,
    rondo::Runtime::builder()
        .worker_threads(workers())
        .build()
        .unwrap(),
    rondo::spawn,
    rondo::time::sleep_until
);
timer_workloads!(
    on_tokio,
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers())
        .enable_time()
        .build()
        .unwrap(),
    tokio::spawn,
    |d: Instant| tokio::time::sleep_until(d.into())
);

fn lateness(which: Which, ds: &Arc<Vec<Duration>>) -> Lateness {
    let late: Arc<Vec<AtomicU64>> = Arc::new((0..ds.len()).map(|_| AtomicU64::new(0)).collect());
    let cpu = match which {
        Which::Rondo => on_rondo::lateness(ds, &late),
        Which::Tokio => on_tokio::lateness(ds, &late),
    };
    let mut v: Vec<u64> = late.iter().map(|a| a.load(Ordering::Relaxed)).collect();
    v.sort_unstable();
    let at = |q: f64| Duration::from_nanos(v[((v.len() - 1) as f64 * q) as usize]);
    Lateness {
        p50: at(0.5),
        p99: at(0.99),
        max: at(1.0),
        cpu,
    }
}

fn idle_cpu(which: Which) -> Duration {
    match which {
        Which::Rondo => on_rondo::idle_cpu(),
        Which::Tokio => on_tokio::idle_cpu(),
    }
}

fn poll_once<F: Future>(f: Pin<&mut F>) -> bool {
    let waker = futures::task::noop_waker();
    f.poll(&mut Context::from_waker(&waker)).is_pending()
}

/// Per-timer ns of (arm + cancel, arm, cancel) with `live` timers already armed on this worker.
async fn arm_cancel<S: Future + Send + 'static>(
    live: usize,
    make: impl Fn(Instant) -> S,
) -> [f64; 3] {
    let far = Instant::now() + Duration::from_secs(3600);
    let mut held: Vec<Pin<Box<S>>> = (0..live)
        .map(|i| {
            Box::pin(make(
                far + Duration::from_micros(i as u64 * 7 % 3_600_000_000),
            ))
        })
        .collect();
    for s in &mut held {
        assert!(poll_once(s.as_mut()));
    }
    let t = Instant::now();
    for i in 0..ARMS {
        let s = pin!(make(far + Duration::from_micros(i as u64 * 13)));
        assert!(poll_once(s));
    }
    let both = t.elapsed();
    let new_batch = || -> Vec<Pin<Box<S>>> {
        (0..ARMS)
            .map(|i| Box::pin(make(far + Duration::from_micros(i as u64 * 13))))
            .collect()
    };
    // A warm-up arming of the same batch, off the clock: the timed one then measures the steady
    // state of a runtime that has held this many timers before. Without it, rondo's timed loop
    // touched fresh pages of its wheel's entry slab (about a hundred page faults per 10,000
    // timers) while tokio's entries, inside the boxed sleeps, were touched when the boxes were
    // filled before the clock started.
    let mut batch = new_batch();
    for s in &mut batch {
        assert!(poll_once(s.as_mut()));
    }
    batch.clear();
    let mut batch = new_batch();
    let t = Instant::now();
    for s in &mut batch {
        assert!(poll_once(s.as_mut()));
    }
    let arm = t.elapsed();
    // Only the sleeps are dropped on the clock: the vector's 80 KB buffer is freed after it stops.
    // Freeing a buffer that large makes glibc consolidate its fastbins, which walks every small
    // chunk freed just before (here the boxed sleeps themselves, when they are small enough), so
    // a `drop(batch)` on the clock measured the allocator's pass as much as the cancels.
    let t = Instant::now();
    batch.clear();
    let cancel = t.elapsed();
    drop(batch);
    drop(held);
    let per = |d: Duration| d.as_nanos() as f64 / ARMS as f64;
    [per(both), per(arm), per(cancel)]
}

fn arm_cancel_run(which: Which, live: usize) -> [f64; 3] {
    match which {
        Which::Rondo => on_rondo::arm_cancel_run(live),
        Which::Tokio => on_tokio::arm_cancel_run(live),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn ratio(a: f64, b: f64) -> String {
    format!("{:.2}", a / b)
}

fn main() {
    // `cargo bench` passes `--bench`; a filter argument is not supported.
    let w = workers();
    println!("timers: {w} workers per runtime, {} cores\n", cores());

    // (b) lateness of 100,000 concurrent sleeps.
    let ds = Arc::new(deadlines(SLEEPERS));
    let mut rounds: Vec<(Lateness, Lateness)> = Vec::new();
    for _ in 0..ROUNDS {
        let r = lateness(Which::Rondo, &ds);
        let t = lateness(Which::Tokio, &ds);
        rounds.push((r, t));
    }
    rounds.sort_by_key(|(r, _)| r.p99);
    let (r, _) = &rounds[ROUNDS / 2];
    let mut tokio_rounds: Vec<&Lateness> = rounds.iter().map(|(_, t)| t).collect();
    tokio_rounds.sort_by_key(|t| t.p99);
    let t = tokio_rounds[ROUNDS / 2];
    println!(
        "(b) {SLEEPERS} concurrent sleeps of 1–100 ms, lateness (median round of {ROUNDS} by p99)"
    );
    print_table(
        &["runtime", "p50 ms", "p99 ms", "max ms", "CPU ms"],
        &[
            vec!["rondo".into(), ms(r.p50), ms(r.p99), ms(r.max), ms(r.cpu)],
            vec!["tokio".into(), ms(t.p50), ms(t.p99), ms(t.max), ms(t.cpu)],
        ],
    );

    // (c) idle runtime with 10,000 long timers.
    let ri = idle_cpu(Which::Rondo);
    let ti = idle_cpu(Which::Tokio);
    println!("\n(c) idle runtime holding {IDLE_TIMERS} ten-minute timers: CPU time over 1 s");
    print_table(
        &["runtime", "CPU ms"],
        &[vec!["rondo".into(), ms(ri)], vec!["tokio".into(), ms(ti)]],
    );

    // (d) arm and cancel.
    println!("\n(d) arm + cancel on one task, ns per timer, best of {ROUNDS}");
    let mut rows = Vec::new();
    for live in [1_000, 100_000, 1_000_000] {
        let mut best = [[f64::MAX; 3]; 2];
        for _ in 0..ROUNDS {
            for (k, which) in [Which::Rondo, Which::Tokio].into_iter().enumerate() {
                let v = arm_cancel_run(which, live);
                for j in 0..3 {
                    best[k][j] = best[k][j].min(v[j]);
                }
            }
        }
        let [r, t] = best;
        rows.push(vec![
            format!("{live} live"),
            format!("{:.1}", r[0]),
            format!("{:.1}", t[0]),
            ratio(r[0], t[0]),
            format!("{:.1}", r[1]),
            format!("{:.1}", t[1]),
            format!("{:.1}", r[2]),
            format!("{:.1}", t[2]),
        ]);
    }
    print_table(
        &[
            "timers",
            "rondo arm+cancel",
            "tokio arm+cancel",
            "ratio",
            "rondo arm",
            "tokio arm",
            "rondo cancel",
            "tokio cancel",
        ],
        &rows,
    );
}
