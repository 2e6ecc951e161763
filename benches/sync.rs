//! rondo::sync vs tokio::sync and async-lock, printed as one table.
//!
//! * Uncontended acquire + release: the future is created, polled once (it must complete) and the
//!   guard dropped, in a tight loop on one thread; best of several runs, ns per operation.
//! * Contended: every contender runs on the same tokio multi-thread runtime with 2 workers (the
//!   primitives are runtime-agnostic, so the executor is a constant). A reader-writer mix of 10 tasks ×
//!   1,000 operations with about 1 µs of busy work inside the guard, and a semaphore with 100 tasks ×
//!   1,000 operations on 10 permits. Throughput is operations per second of wall time (higher is
//!   better; best of 9 runs); worst wait is the longest time any single acquire waited in a run, in µs
//!   (lower is better; median of the 9 runs).
//!
//! The last column is rondo ÷ best peer: below 1 is better for ns/op and waits, above 1 is better for
//! throughput.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rondo::sync::{AsyncOneManyLock, Semaphore};

const RUNS: usize = 5;
const UNCONTENDED_ITERS: u32 = 2_000_000;

/// Polls a future once; it must complete (uncontended acquires do).
#[inline(always)]
fn now<F: Future>(f: F) -> F::Output {
    let waker = std::task::Waker::noop();
    match pin!(f).poll(&mut Context::from_waker(waker)) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("uncontended acquire did not complete on the first poll"),
    }
}

/// Best-of-`RUNS` nanoseconds per iteration of `body`.
fn ns_per_op(mut body: impl FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..RUNS {
        let start = Instant::now();
        for _ in 0..UNCONTENDED_ITERS {
            body();
        }
        best = best.min(start.elapsed().as_nanos() as f64 / f64::from(UNCONTENDED_ITERS));
    }
    best
}

/// About 1 µs of work: a calibrated spin.
fn busy(spins: u64) {
    let mut x = 0u64;
    for i in 0..spins {
        x = black_box(x.wrapping_add(i));
    }
    black_box(x);
}

fn calibrate_1us() -> u64 {
    let spins = 100_000;
    let mut best = Duration::MAX;
    for _ in 0..5 {
        let t = Instant::now();
        busy(spins);
        best = best.min(t.elapsed());
    }
    (spins as f64 * 1_000.0 / best.as_nanos() as f64).max(1.0) as u64
}

#[derive(Clone, Copy, PartialEq)]
enum Who {
    Rondo,
    Tokio,
    AsyncLock,
}

const WHO: [Who; 3] = [Who::Rondo, Who::Tokio, Who::AsyncLock];

struct Locks {
    rondo: AsyncOneManyLock<u64>,
    tokio: tokio::sync::RwLock<u64>,
    async_lock: async_lock::RwLock<u64>,
}

struct Sems {
    rondo: Semaphore,
    tokio: tokio::sync::Semaphore,
    async_lock: async_lock::Semaphore,
}

/// Result of one contended run: (ops per second, worst wait in µs).
type Contended = (f64, f64);

/// Times one acquire of `$acquire`, then holds the guard `$g` for ~1 µs of `busy(spins)` and runs
/// `$use` on it; evaluates to how long the acquire waited.
macro_rules! hold {
    ($spins:expr, $acquire:expr, |$g:ident| $use:expr) => {{
        let t0 = Instant::now();
        #[allow(unused_mut)]
        let mut $g = $acquire.await;
        let waited = t0.elapsed();
        busy($spins);
        $use;
        waited
    }};
}

/// Runs `tasks` tasks of `ops` operations each on `rt`, all at once. `task(t)` is task `t`: it
/// returns the longest any of its acquires waited.
fn contended<F, Fut>(rt: &tokio::runtime::Runtime, tasks: usize, ops: usize, task: F) -> Contended
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Duration> + Send + 'static,
{
    rt.block_on(async {
        let start = Instant::now();
        let handles: Vec<_> = (0..tasks).map(|t| tokio::spawn(task(t))).collect();
        let mut worst = Duration::ZERO;
        for h in handles {
            worst = worst.max(h.await.unwrap());
        }
        let secs = start.elapsed().as_secs_f64();
        ((tasks * ops) as f64 / secs, worst.as_secs_f64() * 1e6)
    })
}

fn rw_run(rt: &tokio::runtime::Runtime, who: Who, write_every: usize, spins: u64) -> Contended {
    const OPS: usize = 1_000;
    let locks = Arc::new(Locks {
        rondo: AsyncOneManyLock::new(0),
        tokio: tokio::sync::RwLock::new(0),
        async_lock: async_lock::RwLock::new(0),
    });
    contended(rt, 10, OPS, |t| {
        let locks = locks.clone();
        async move {
            let mut worst = Duration::ZERO;
            for op in 0..OPS {
                let waited = match (who, (op + t) % write_every == 0) {
                    (Who::Rondo, true) => hold!(spins, locks.rondo.exclusive(), |g| *g += 1),
                    (Who::Rondo, false) => hold!(spins, locks.rondo.shared(), |g| black_box(*g)),
                    (Who::Tokio, true) => hold!(spins, locks.tokio.write(), |g| *g += 1),
                    (Who::Tokio, false) => hold!(spins, locks.tokio.read(), |g| black_box(*g)),
                    (Who::AsyncLock, true) => hold!(spins, locks.async_lock.write(), |g| *g += 1),
                    (Who::AsyncLock, false) => {
                        hold!(spins, locks.async_lock.read(), |g| black_box(*g))
                    }
                };
                worst = worst.max(waited);
            }
            worst
        }
    })
}

fn sem_run(rt: &tokio::runtime::Runtime, who: Who, spins: u64) -> Contended {
    const OPS: usize = 1_000;
    const PERMITS: usize = 10;
    let sems = Arc::new(Sems {
        rondo: Semaphore::new(PERMITS),
        tokio: tokio::sync::Semaphore::new(PERMITS),
        async_lock: async_lock::Semaphore::new(PERMITS),
    });
    contended(rt, 100, OPS, |_| {
        let sems = sems.clone();
        async move {
            let mut worst = Duration::ZERO;
            for _ in 0..OPS {
                let waited = match who {
                    Who::Rondo => hold!(spins, sems.rondo.acquire(), |p| drop(p.unwrap())),
                    Who::Tokio => hold!(spins, sems.tokio.acquire(), |p| drop(p.unwrap())),
                    Who::AsyncLock => hold!(spins, sems.async_lock.acquire(), |p| drop(p)),
                };
                worst = worst.max(waited);
            }
            worst
        }
    })
}

const CONTENDED_RUNS: usize = 9;

/// Best throughput and *median* worst wait over `CONTENDED_RUNS` runs, contenders interleaved run by
/// run so that background load hits all of them alike. (The best worst-wait would reward a lucky run
/// in which the tasks happened not to overlap at all.)
fn best_of(mut run: impl FnMut(Who) -> Contended) -> [Contended; 3] {
    let mut tput = [0.0f64; 3];
    let mut waits: [Vec<f64>; 3] = Default::default();
    for _ in 0..CONTENDED_RUNS {
        for (i, who) in WHO.into_iter().enumerate() {
            let (t, w) = run(who);
            tput[i] = tput[i].max(t);
            waits[i].push(w);
        }
    }
    std::array::from_fn(|i| {
        waits[i].sort_by(f64::total_cmp);
        (tput[i], waits[i][CONTENDED_RUNS / 2])
    })
}

struct Row {
    name: &'static str,
    unit: &'static str,
    values: [f64; 3],
    higher_is_better: bool,
}

fn main() {
    // Uncontended.
    let rl = AsyncOneManyLock::new(0u64);
    let tl = tokio::sync::RwLock::new(0u64);
    let al = async_lock::RwLock::new(0u64);
    let rs = Semaphore::new(1);
    let ts = tokio::sync::Semaphore::new(1);
    let als = async_lock::Semaphore::new(1);
    let mut rows = vec![
        Row {
            name: "uncontended shared acquire+release",
            unit: "ns/op",
            values: [
                ns_per_op(|| drop(black_box(now(black_box(&rl).shared())))),
                ns_per_op(|| drop(black_box(now(black_box(&tl).read())))),
                ns_per_op(|| drop(black_box(now(black_box(&al).read())))),
            ],
            higher_is_better: false,
        },
        Row {
            name: "uncontended exclusive acquire+release",
            unit: "ns/op",
            values: [
                ns_per_op(|| drop(black_box(now(black_box(&rl).exclusive())))),
                ns_per_op(|| drop(black_box(now(black_box(&tl).write())))),
                ns_per_op(|| drop(black_box(now(black_box(&al).write())))),
            ],
            higher_is_better: false,
        },
        Row {
            name: "uncontended semaphore acquire+release",
            unit: "ns/op",
            values: [
                ns_per_op(|| drop(black_box(now(black_box(&rs).acquire())))),
                ns_per_op(|| drop(black_box(now(black_box(&ts).acquire())))),
                ns_per_op(|| drop(black_box(now(black_box(&als).acquire())))),
            ],
            higher_is_better: false,
        },
    ];

    // Contended, all on one tokio runtime with 2 workers.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let spins = calibrate_1us();
    for (name, write_every) in [
        ("rw 90/10, 10 tasks x 1000", 10),
        ("rw 50/50, 10 tasks x 1000", 2),
    ] {
        let best = best_of(|who| rw_run(&rt, who, write_every, spins));
        rows.push(Row {
            name,
            unit: "ops/s",
            values: best.map(|b| b.0),
            higher_is_better: true,
        });
        rows.push(Row {
            name,
            unit: "worst wait us",
            values: best.map(|b| b.1),
            higher_is_better: false,
        });
    }
    let best = best_of(|who| sem_run(&rt, who, spins));
    let name = "semaphore, 100 tasks x 1000 on 10 permits";
    rows.push(Row {
        name,
        unit: "ops/s",
        values: best.map(|b| b.0),
        higher_is_better: true,
    });
    rows.push(Row {
        name,
        unit: "worst wait us",
        values: best.map(|b| b.1),
        higher_is_better: false,
    });

    println!(
        "| {:<42} | {:<13} | {:>12} | {:>12} | {:>12} | {:>10} |",
        "benchmark", "unit", "rondo", "tokio", "async-lock", "rondo/best"
    );
    println!(
        "|{:-<44}|{:-<15}|{:->14}|{:->14}|{:->14}|{:->12}|",
        "", "", "", "", "", ""
    );
    for r in rows {
        let [rondo, tokio, al] = r.values;
        let best_peer = if r.higher_is_better {
            tokio.max(al)
        } else {
            tokio.min(al)
        };
        let fmt = |v: f64| {
            if v >= 1e4 {
                format!("{v:.0}")
            } else {
                format!("{v:.1}")
            }
        };
        println!(
            "| {:<42} | {:<13} | {:>12} | {:>12} | {:>12} | {:>10.2} |",
            r.name,
            r.unit,
            fmt(rondo),
            fmt(tokio),
            fmt(al),
            rondo / best_peer
        );
    }
}
