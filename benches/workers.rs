//! The worker count under blocking polls (issue 55): rondo with `worker_threads(2)` and
//! `max_worker_threads(64)` (the controller adds cores while polls block) against fixed counts.
//!
//! 1. **Blocking**: 2,000 tasks, each blocking 1 ms in the operating system
//!    (`std::thread::sleep`, as a synchronous client would) and then computing 20 µs. Adaptive
//!    rondo, rondo and tokio with 2 workers, and both swept over fixed counts 2 to 64; the ratios
//!    to the best fixed count and to 2 fixed workers.
//! 2. **CPU-bound**: 2,000 tasks computing 200 µs each: adaptive against 2 fixed workers, and the
//!    peak number of cores (the controller must add none).
//! 3. **Mixed**: 2,000 tasks, every other one blocking as in 1, the rest computing 200 µs:
//!    adaptive against rondo's best fixed count.
//!
//! "Computing" is CPU time the task burns, read from its thread's CPU clock (a preempted task
//! still does all its work). Runs are interleaved: round r runs every configuration once, then
//! round r + 1; each figure is the best of `ROUNDS`, and the mixed row also compares medians
//! (the best of several near-equal fixed counts is the least of more runs than adaptive's best).
//! Before each run the adaptive runtime waits, outside the timing, until its controller has
//! retired the cores of the last run, so each run starts at 2 cores. Run with
//! `cargo bench --bench workers`; about a minute. Arguments name the rows to run (`blocking`,
//! `cpu`, `mixed`; all by default): `cargo bench --bench workers -- mixed`.

use std::time::{Duration, Instant};

mod common;

const ROUNDS: usize = 7;
const TASKS: usize = 2_000;
const BLOCK: Duration = Duration::from_millis(1);
const COMPUTE: Duration = Duration::from_micros(20);
const CPU_TASK: Duration = Duration::from_micros(200);
const SWEEP: [usize; 6] = [2, 4, 8, 16, 32, 64];

/// Computes until the calling thread has burned `d` of CPU time (its own CPU clock, not the wall
/// clock): a task the system preempts still does all its work, so configurations with more
/// threads than CPUs do not finish their computing early.
fn spin(d: Duration) {
    let start = common::thread_cpu();
    while common::thread_cpu().saturating_sub(start) < d {
        for _ in 0..64 {
            std::hint::spin_loop();
        }
    }
}

/// What task `i` of a workload does.
#[derive(Clone, Copy)]
enum Load {
    Blocking,
    Cpu,
    Mixed,
}

impl Load {
    fn task(self, i: usize) {
        let blocking = match self {
            Load::Blocking => true,
            Load::Cpu => false,
            Load::Mixed => i % 2 == 0,
        };
        if blocking {
            std::thread::sleep(BLOCK);
            spin(COMPUTE);
        } else {
            spin(CPU_TASK);
        }
    }
}

fn rondo_fixed(n: usize) -> rondo::Runtime {
    rondo::Runtime::builder().worker_threads(n).build().unwrap()
}

fn rondo_adaptive() -> rondo::Runtime {
    rondo::Runtime::builder()
        .worker_threads(2)
        .max_worker_threads(64)
        .build()
        .unwrap()
}

fn tokio_fixed(n: usize) -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(n)
        .build()
        .unwrap()
}

fn run_rondo(rt: &rondo::Runtime, load: Load) -> Duration {
    rt.block_on(async move {
        let start = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| rondo::spawn(async move { load.task(i) }))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    })
}

fn run_tokio(rt: &tokio::runtime::Runtime, load: Load) -> Duration {
    rt.block_on(async move {
        let start = Instant::now();
        let tasks: Vec<_> = (0..TASKS)
            .map(|i| tokio::spawn(async move { load.task(i) }))
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        start.elapsed()
    })
}

/// One adaptive run: its time and the peak number of cores. It starts at 2 cores: the run waits
/// (up to 5 s) for the cores a previous run added to retire.
fn run_adaptive(rt: &rondo::Runtime, load: Load) -> (Duration, usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while rt.metrics().worker_cores > 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let d = run_rondo(rt, load);
    (d, rt.metrics().worker_cores_peak)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

/// The index and time of the fastest configuration in `v` (not empty).
fn fastest(v: &[Duration]) -> (usize, Duration) {
    v.iter()
        .copied()
        .enumerate()
        .min_by_key(|&(_, d)| d)
        .unwrap()
}

/// The median of `v` (not empty).
fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn best(a: &mut Duration, d: Duration) {
    *a = (*a).min(d);
}

fn main() {
    let started = Instant::now();
    println!(
        "worker count under blocking polls: {TASKS} tasks, best of {ROUNDS} interleaved rounds, {} \
         CPUs",
        std::thread::available_parallelism().map_or(1, |n| n.get())
    );
    let rows: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let row = |name: &str| rows.is_empty() || rows.iter().any(|r| r == name);
    let rondos: Vec<_> = SWEEP.iter().map(|&n| rondo_fixed(n)).collect();
    let tokios: Vec<_> = SWEEP.iter().map(|&n| tokio_fixed(n)).collect();
    let adaptive_rt = rondo_adaptive();

    // 1. Blocking.
    if row("blocking") {
        let mut adaptive = Duration::MAX;
        let mut adaptive_peak = 0;
        let mut r = vec![Duration::MAX; SWEEP.len()];
        let mut t = vec![Duration::MAX; SWEEP.len()];
        for _ in 0..ROUNDS {
            let (d, peak) = run_adaptive(&adaptive_rt, Load::Blocking);
            best(&mut adaptive, d);
            adaptive_peak = adaptive_peak.max(peak);
            for (i, rt) in rondos.iter().enumerate() {
                best(&mut r[i], run_rondo(rt, Load::Blocking));
            }
            for (i, rt) in tokios.iter().enumerate() {
                best(&mut t[i], run_tokio(rt, Load::Blocking));
            }
        }
        println!("\n1. blocking: each task blocks {BLOCK:?}, then computes {COMPUTE:?}");
        println!("{:>8} {:>12} {:>12}", "workers", "rondo", "tokio");
        for (i, n) in SWEEP.iter().enumerate() {
            println!("{n:>8} {:>12} {:>12}", ms(r[i]), ms(t[i]));
        }
        let (bi, best_fixed) = r
            .iter()
            .chain(t.iter())
            .enumerate()
            .min_by_key(|(_, d)| **d)
            .map(|(i, d)| (i, *d))
            .unwrap();
        let best_name = if bi < SWEEP.len() {
            format!("rondo {}", SWEEP[bi])
        } else {
            format!("tokio {}", SWEEP[bi - SWEEP.len()])
        };
        println!(
            "adaptive rondo (2 to 64): {} (peak {adaptive_peak} cores)\n\
             adaptive / best fixed ({best_name}, {}): {:.2} (target at most 1.25)\n\
             rondo 2 fixed / adaptive: {:.1} (target at least 4)   tokio 2 / adaptive: {:.1}",
            ms(adaptive),
            ms(best_fixed),
            adaptive.as_secs_f64() / best_fixed.as_secs_f64(),
            r[0].as_secs_f64() / adaptive.as_secs_f64(),
            t[0].as_secs_f64() / adaptive.as_secs_f64(),
        );
    }

    // 2. CPU-bound.
    if row("cpu") {
        let mut adaptive = Duration::MAX;
        let mut adaptive_peak = 0;
        let mut fixed = Duration::MAX;
        // A runtime of its own, so that its peak is this workload's.
        let cpu_rt = rondo_adaptive();
        for _ in 0..ROUNDS {
            let (d, peak) = run_adaptive(&cpu_rt, Load::Cpu);
            best(&mut adaptive, d);
            adaptive_peak = adaptive_peak.max(peak);
            best(&mut fixed, run_rondo(&rondos[0], Load::Cpu));
        }
        println!(
            "\n2. CPU-bound: each task computes {CPU_TASK:?}\n\
             adaptive {} (peak {adaptive_peak} cores, {} core adds), rondo 2 fixed {}: ratio {:.2}",
            ms(adaptive),
            cpu_rt.metrics().worker_core_adds,
            ms(fixed),
            adaptive.as_secs_f64() / fixed.as_secs_f64()
        );
        drop(cpu_rt);
    }

    // 3. Mixed.
    if row("mixed") {
        let mut adaptive = Duration::MAX;
        let mut adaptive_peak = 0;
        let mut r = vec![Duration::MAX; SWEEP.len()];
        // Every run, for the medians.
        let mut adaptive_runs = Vec::new();
        let mut runs = vec![Vec::new(); SWEEP.len()];
        for _ in 0..ROUNDS {
            let (d, peak) = run_adaptive(&adaptive_rt, Load::Mixed);
            best(&mut adaptive, d);
            adaptive_runs.push(d);
            adaptive_peak = adaptive_peak.max(peak);
            for (i, rt) in rondos.iter().enumerate() {
                let d = run_rondo(rt, Load::Mixed);
                best(&mut r[i], d);
                runs[i].push(d);
            }
        }
        println!("\n3. mixed: every other task blocking as in 1, the rest computing {CPU_TASK:?}");
        for (i, n) in SWEEP.iter().enumerate() {
            println!("{n:>8} {:>12}", ms(r[i]));
        }
        let (bi, best_fixed) = fastest(&r);
        println!(
            "adaptive {} (peak {adaptive_peak} cores) / best fixed (rondo {}, {}): {:.2} (target at \
             most 1)",
            ms(adaptive),
            SWEEP[bi],
            ms(best_fixed),
            adaptive.as_secs_f64() / best_fixed.as_secs_f64()
        );
        // The best of many near-equal fixed counts is the least of more runs than adaptive's
        // best: the medians compare one figure per configuration, estimated alike.
        let medians: Vec<Duration> = runs.iter().map(|v| median(v)).collect();
        let (mi, median_fixed) = fastest(&medians);
        println!(
            "medians: adaptive {} / best fixed (rondo {}, {}): {:.2} (target at most 1)",
            ms(median(&adaptive_runs)),
            SWEEP[mi],
            ms(median_fixed),
            median(&adaptive_runs).as_secs_f64() / median_fixed.as_secs_f64()
        );
    }

    println!("\ntotal {:.1} s", started.elapsed().as_secs_f64());
}
