//! Why rondo exists, in one run: a small batch of work that arrives behind a flood.
//!
//! A flood of 20,000 tasks, each 20 µs of CPU work, is spawned; 5 ms later a small batch of 200
//! such tasks arrives. The program measures how long each batch takes from its first spawn to its
//! last completion, first on rondo with each batch in its own group, then on tokio's multi-thread
//! runtime, which serves every task from one FIFO. Both runtimes get the same two worker threads
//! and exactly the same tasks.
//!
//! On tokio the small batch waits behind the whole flood. On rondo the two groups share the
//! workers equally while both have work, so the small batch needs about its own 4 ms of work on
//! half the workers, and the flood is barely slowed down.
//!
//! Run it with `cargo run --release --example fairness`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant};

/// Worker threads for both runtimes. Fixed at two so the demo tells the same story on any machine:
/// with many more workers the flood would drain before the small batch even arrived.
const WORKERS: usize = 2;
const FLOOD_TASKS: usize = 20_000;
const SMALL_TASKS: usize = 200;
/// The CPU work of one task, done by busy-waiting (a sleep would free the worker).
const WORK: Duration = Duration::from_micros(20);
/// How long after the flood's first spawn the small batch arrives.
const SMALL_ARRIVES_AFTER: Duration = Duration::from_millis(5);

/// How long each batch took, from its first spawn to its last task's completion.
struct Outcome {
    flood: Duration,
    small: Duration,
}

/// One task: 20 µs of CPU work, then record when it finished (as nanoseconds since `clock`) in
/// `finished`, which ends up holding the batch's latest completion.
async fn job(finished: Arc<AtomicU64>, clock: Instant) {
    let start = Instant::now();
    while start.elapsed() < WORK {
        std::hint::spin_loop();
    }
    finished.fetch_max(clock.elapsed().as_nanos() as u64, Ordering::Relaxed);
}

/// The scenario, independent of the runtime: `spawn_flood` and `spawn_small` spawn one job into
/// the flood's or the small batch's place, and `wait_all` waits for every spawned task.
fn run_scenario<H>(
    spawn_flood: impl Fn(Arc<AtomicU64>, Instant) -> H,
    spawn_small: impl Fn(Arc<AtomicU64>, Instant) -> H,
    wait_all: impl FnOnce(Vec<H>),
) -> Outcome {
    let clock = Instant::now();
    let flood_done = Arc::new(AtomicU64::new(0));
    let small_done = Arc::new(AtomicU64::new(0));
    let mut handles = Vec::with_capacity(FLOOD_TASKS + SMALL_TASKS);

    for _ in 0..FLOOD_TASKS {
        handles.push(spawn_flood(flood_done.clone(), clock));
    }
    if let Some(rest) = SMALL_ARRIVES_AFTER.checked_sub(clock.elapsed()) {
        thread::sleep(rest);
    }
    let small_start = clock.elapsed();
    for _ in 0..SMALL_TASKS {
        handles.push(spawn_small(small_done.clone(), clock));
    }
    wait_all(handles);

    let at = |a: &AtomicU64| Duration::from_nanos(a.load(Ordering::Relaxed));
    Outcome {
        flood: at(&flood_done),
        small: at(&small_done) - small_start,
    }
}

/// rondo: the flood and the small batch each get a group of equal weight.
fn on_rondo() -> Outcome {
    let rt = rondo::Runtime::builder()
        .worker_threads(WORKERS)
        .build()
        .expect("cannot start rondo");
    let flood = rt.group().name("flood").build().expect("group");
    let small = rt.group().name("small").build().expect("group");
    run_scenario(
        |done, clock| flood.spawn(job(done, clock)),
        |done, clock| small.spawn(job(done, clock)),
        |handles| {
            rt.block_on(async {
                for h in handles {
                    h.await.expect("task failed");
                }
            })
        },
    )
}

/// tokio: the same tasks, spawned the same way; there is one queue for everything.
fn on_tokio() -> Outcome {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(WORKERS)
        .build()
        .expect("cannot start tokio");
    let handle = rt.handle();
    run_scenario(
        |done, clock| handle.spawn(job(done, clock)),
        |done, clock| handle.spawn(job(done, clock)),
        |handles| {
            rt.block_on(async {
                for h in handles {
                    h.await.expect("task failed");
                }
            })
        },
    )
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}

fn main() {
    println!(
        "A flood of {FLOOD_TASKS} tasks × {} µs of CPU work arrives; {} ms later, a small batch of \
         {SMALL_TASKS} tasks × {} µs.",
        WORK.as_micros(),
        SMALL_ARRIVES_AFTER.as_millis(),
        WORK.as_micros()
    );
    println!(
        "Both runtimes use {WORKERS} worker threads ({} cores available).",
        thread::available_parallelism().map_or(1, |n| n.get())
    );
    println!();

    let rondo = on_rondo();
    let tokio = on_tokio();

    // With half of the workers to itself, the small batch's work takes this long.
    let ideal = (WORK * SMALL_TASKS as u32).mul_f64(2.0 / WORKERS as f64);
    println!(
        "{:<22}{:>22}{:>22}",
        "", "rondo (two groups)", "tokio (one queue)"
    );
    println!(
        "{:<22}{:>22}{:>22}",
        "flood batch finished",
        ms(rondo.flood),
        ms(tokio.flood)
    );
    println!(
        "{:<22}{:>22}{:>22}",
        "small batch finished",
        ms(rondo.small),
        ms(tokio.small)
    );
    println!(
        "(times from each batch's first spawn; the small batch's fair-share ideal is {})",
        ms(ideal)
    );
    println!();

    let sooner = tokio.small.as_secs_f64() / rondo.small.as_secs_f64();
    let flood_cost = rondo.flood.as_secs_f64() / tokio.flood.as_secs_f64();
    if sooner > 1.0 {
        println!(
            "rondo finished the small batch {sooner:.0}× sooner than tokio, while its flood took \
             {flood_cost:.2}× as long as tokio's."
        );
    } else {
        println!(
            "This run did not show the effect: rondo's small batch took {:.2}× as long as tokio's \
             (flood {flood_cost:.2}×).",
            1.0 / sooner
        );
    }
}
