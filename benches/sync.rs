//! rondo::sync (fair, and bounded-barging with a 1 ms bound) vs tokio::sync and async-lock, printed
//! as one table.
//!
//! * Uncontended acquire + release: the future is created, polled once (it must complete) and the
//!   guard dropped, in a tight loop on one thread; best of several runs, ns per operation.
//! * Contended: every contender runs on the same tokio multi-thread runtime (the primitives are
//!   runtime-agnostic, so the executor is a constant) with `RONDO_BENCH_WORKERS` workers (2 by
//!   default). Rows:
//!   - rw 90/10 and 50/50, 10 tasks × 1,000 operations with about 1 µs of busy work in the guard;
//!   - a semaphore with 100 tasks × 1,000 operations on 10 permits, ~1 µs held;
//!   - rw 90/10 with 4 tasks per worker × 2,000 operations, about 50 adds under the write guard and
//!     a plain read under the shared one;
//!   - a semaphore with one permit per worker and 8 tasks per worker × 1,000 operations, each
//!     yielding once to the executor while it holds its permit.
//!
//!   Throughput is operations per second of wall time (higher is better; best of 9 runs); worst wait
//!   is the longest time any single acquire waited in a run, in µs (lower is better; median of the 9
//!   runs).
//!
//! The last columns are each rondo variant ÷ the best peer: below 1 is better for ns/op and waits,
//! above 1 is better for throughput.
//!
//! * Weighted (a second table): on a rondo runtime with `RONDO_BENCH_WORKERS` workers, a weight-6
//!   and a weight-1 group, 100 tasks each (spawned alternately), each acquiring once a 2-permit
//!   semaphore, or the lock in write mode; a holder spins 300 µs, then sleeps 1 ms. The row is the
//!   weight-1 group's count among the first 100 grants: its share by weight is 100 ÷ 7 ≈ 14. rondo's
//!   group-fair constructors (`Semaphore::group_fair`, `AsyncOneManyLock::group_fair`), its fair
//!   mode, tokio and async-lock; median and range of `WEIGHTED_RUNS` runs, interleaved.
//!
//! * Inheritance (a third table): on a rondo runtime with `RONDO_BENCH_WORKERS` workers, F (weight
//!   10) floods the workers with CPU-bound tasks (four per worker, 1 ms polls of CPU time, yielding
//!   between); then a task of L (weight 1) takes the primitive and works through 20 ms of CPU time
//!   in 1 ms polls, yielding between, while a task of H (weight 100) waits for it from before L
//!   starts. Rows: H's wait ÷ L's 20 ms (1 is the floor: L alone on a core), and L's share of the
//!   CPU that L and F used while H waited (one task can use at most one worker: `1 / workers` is
//!   its ceiling where F keeps the others busy). "with": the group-fair constructors, where L runs
//!   at H's weight (weight inheritance); "without": the fair ones, where L keeps its own.
//!   The lock in write mode and a 1-permit semaphore; median and range of `INHERIT_RUNS` runs,
//!   interleaved.
//!
//! After the first table, a small table gives the uncontended acquire+release of the group-fair
//! constructors beside the fair ones, outside any group and in a group's task; their fast paths
//! also check whose holds go uncounted (weight inheritance).
//!
//! `RONDO_BENCH_SYNC=icount` runs one uncontended variant for callgrind (see `icount`).
//! `RONDO_BENCH_SYNC=uncontended` runs the uncontended rows only; `RONDO_BENCH_SYNC=weighted`
//! the weighted and inheritance tables only; `RONDO_BENCH_SYNC=inherit` the inheritance table.

use std::future::Future;
use std::hint::black_box;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use rondo::sync::{AsyncOneManyLock, Semaphore};

mod common;

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

/// `ns_per_op` of one acquire and one release while three other permits of the same semaphore are
/// held: each release gives back the oldest of four permits, taken three acquires ago (the
/// semaphore changed since, as when several tasks hold permits at once).
fn overlapping<P>(mut acquire: impl FnMut() -> P) -> f64 {
    let mut held: std::collections::VecDeque<P> = (0..3).map(|_| acquire()).collect();
    let ns = ns_per_op(|| {
        held.push_back(acquire());
        drop(black_box(held.pop_front()));
    });
    drop(held);
    ns
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
    Fair,
    Barging,
    Tokio,
    AsyncLock,
}

const WHO: [Who; 4] = [Who::Fair, Who::Barging, Who::Tokio, Who::AsyncLock];

/// The barging bound measured here: `RONDO_BENCH_BARGE_US` microseconds, or 1 ms (Go's
/// `sync.Mutex` value).
fn bound() -> Duration {
    match std::env::var("RONDO_BENCH_BARGE_US") {
        Ok(v) => match v.trim().parse::<u64>() {
            Ok(us) => Duration::from_micros(us),
            Err(_) => {
                panic!("RONDO_BENCH_BARGE_US must be a whole number of microseconds (got {v:?})")
            }
        },
        Err(_) => Duration::from_millis(1),
    }
}

struct Locks {
    fair: AsyncOneManyLock<u64>,
    barging: AsyncOneManyLock<u64>,
    tokio: tokio::sync::RwLock<u64>,
    async_lock: async_lock::RwLock<u64>,
}

impl Locks {
    fn new() -> Arc<Self> {
        Arc::new(Locks {
            fair: AsyncOneManyLock::new(0),
            barging: AsyncOneManyLock::with_barging(0, bound()),
            tokio: tokio::sync::RwLock::new(0),
            async_lock: async_lock::RwLock::new(0),
        })
    }

    fn rondo(&self, who: Who) -> &AsyncOneManyLock<u64> {
        if who == Who::Fair {
            &self.fair
        } else {
            &self.barging
        }
    }
}

struct Sems {
    fair: Semaphore,
    barging: Semaphore,
    tokio: tokio::sync::Semaphore,
    async_lock: async_lock::Semaphore,
}

impl Sems {
    fn new(permits: usize) -> Arc<Self> {
        Arc::new(Sems {
            fair: Semaphore::new(permits),
            barging: Semaphore::with_barging(permits, bound()),
            tokio: tokio::sync::Semaphore::new(permits),
            async_lock: async_lock::Semaphore::new(permits),
        })
    }

    fn rondo(&self, who: Who) -> &Semaphore {
        if who == Who::Fair {
            &self.fair
        } else {
            &self.barging
        }
    }
}

/// Result of one contended run: (ops per second, worst wait in µs).
type Contended = (f64, f64);

/// Times one acquire of `$acquire`, then holds the guard `$g` for `busy(spins)` and runs `$use` on it
/// (which may await); evaluates to how long the acquire waited.
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

/// What a task does inside the guard.
#[derive(Clone, Copy)]
enum Work {
    /// About 1 µs of busy work (`spins` of the calibrated loop) in either mode.
    Spin(u64),
    /// About 50 dependent adds under the write guard; a plain read under the shared one.
    Adds,
}

/// About 50 dependent adds, the write guard's work in the `Work::Adds` rows.
#[inline(never)]
fn add50(mut x: u64) -> u64 {
    for i in 0..50 {
        x = black_box(x.wrapping_add(i));
    }
    x
}

struct RwLoad {
    tasks: usize,
    ops: usize,
    write_every: usize,
    work: Work,
}

fn rw_run(rt: &tokio::runtime::Runtime, who: Who, load: &RwLoad) -> Contended {
    let &RwLoad {
        tasks,
        ops,
        write_every,
        work,
    } = load;
    let spins = match work {
        Work::Spin(s) => s,
        Work::Adds => 0,
    };
    let write = move |g: &mut u64| match work {
        Work::Spin(_) => *g += 1,
        Work::Adds => *g = add50(*g),
    };
    let locks = Locks::new();
    contended(rt, tasks, ops, |t| {
        let locks = locks.clone();
        async move {
            let mut worst = Duration::ZERO;
            for op in 0..ops {
                let writer = (op + t) % write_every == 0;
                let waited = match who {
                    Who::Fair | Who::Barging => {
                        let l = locks.rondo(who);
                        if writer {
                            hold!(spins, l.exclusive(), |g| write(&mut g))
                        } else {
                            hold!(spins, l.shared(), |g| black_box(*g))
                        }
                    }
                    Who::Tokio if writer => hold!(spins, locks.tokio.write(), |g| write(&mut g)),
                    Who::Tokio => hold!(spins, locks.tokio.read(), |g| black_box(*g)),
                    Who::AsyncLock if writer => {
                        hold!(spins, locks.async_lock.write(), |g| write(&mut g))
                    }
                    Who::AsyncLock => hold!(spins, locks.async_lock.read(), |g| black_box(*g)),
                };
                worst = worst.max(waited);
            }
            worst
        }
    })
}

struct SemLoad {
    tasks: usize,
    ops: usize,
    permits: usize,
    spins: u64,
    /// Yield to the executor once while holding the permit.
    yield_held: bool,
}

/// What a semaphore task does while it holds its permit, besides the busy work.
async fn while_held(yield_held: bool) {
    if yield_held {
        tokio::task::yield_now().await;
    }
}

fn sem_run(rt: &tokio::runtime::Runtime, who: Who, load: &SemLoad) -> Contended {
    let &SemLoad {
        tasks,
        ops,
        permits,
        spins,
        yield_held,
    } = load;
    let sems = Sems::new(permits);
    contended(rt, tasks, ops, |_| {
        let sems = sems.clone();
        async move {
            let mut worst = Duration::ZERO;
            for _ in 0..ops {
                let waited = match who {
                    Who::Fair | Who::Barging => hold!(spins, sems.rondo(who).acquire(), |p| {
                        while_held(yield_held).await;
                        drop(p.unwrap())
                    }),
                    Who::Tokio => hold!(spins, sems.tokio.acquire(), |p| {
                        while_held(yield_held).await;
                        drop(p.unwrap())
                    }),
                    Who::AsyncLock => hold!(spins, sems.async_lock.acquire(), |p| {
                        while_held(yield_held).await;
                        drop(p)
                    }),
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
fn best_of(mut run: impl FnMut(Who) -> Contended) -> [Contended; 4] {
    let mut tput = [0.0f64; 4];
    let mut waits: [Vec<f64>; 4] = Default::default();
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
    name: String,
    unit: &'static str,
    values: [f64; 4],
    higher_is_better: bool,
}

/// The throughput row and the worst-wait row of one contended workload.
fn push_contended(rows: &mut Vec<Row>, name: &str, best: [Contended; 4]) {
    rows.push(Row {
        name: name.to_string(),
        unit: "ops/s",
        values: best.map(|b| b.0),
        higher_is_better: true,
    });
    rows.push(Row {
        name: name.to_string(),
        unit: "worst wait us",
        values: best.map(|b| b.1),
        higher_is_better: false,
    });
}

fn main() {
    if std::env::var("RONDO_BENCH_SYNC").as_deref() == Ok("icount") {
        icount();
        return;
    }
    // Uncontended. The barging variants share the fair ones' fast paths; they are measured anyway.
    let rl = AsyncOneManyLock::new(0u64);
    let rlb = AsyncOneManyLock::with_barging(0u64, bound());
    let tl = tokio::sync::RwLock::new(0u64);
    let al = async_lock::RwLock::new(0u64);
    let rs = Semaphore::new(1);
    let rsb = Semaphore::with_barging(1, bound());
    let ts = tokio::sync::Semaphore::new(1);
    let als = async_lock::Semaphore::new(1);
    let rs4 = Semaphore::new(4);
    let rsb4 = Semaphore::with_barging(4, bound());
    let ts4 = tokio::sync::Semaphore::new(4);
    let als4 = async_lock::Semaphore::new(4);
    let mut rows = vec![
        Row {
            name: "uncontended shared acquire+release".into(),
            unit: "ns/op",
            values: [
                ns_per_op(|| drop(black_box(now(black_box(&rl).shared())))),
                ns_per_op(|| drop(black_box(now(black_box(&rlb).shared())))),
                ns_per_op(|| drop(black_box(now(black_box(&tl).read())))),
                ns_per_op(|| drop(black_box(now(black_box(&al).read())))),
            ],
            higher_is_better: false,
        },
        Row {
            name: "uncontended exclusive acquire+release".into(),
            unit: "ns/op",
            values: [
                ns_per_op(|| drop(black_box(now(black_box(&rl).exclusive())))),
                ns_per_op(|| drop(black_box(now(black_box(&rlb).exclusive())))),
                ns_per_op(|| drop(black_box(now(black_box(&tl).write())))),
                ns_per_op(|| drop(black_box(now(black_box(&al).write())))),
            ],
            higher_is_better: false,
        },
        Row {
            name: "uncontended semaphore acquire+release".into(),
            unit: "ns/op",
            values: [
                ns_per_op(|| drop(black_box(now(black_box(&rs).acquire())))),
                ns_per_op(|| drop(black_box(now(black_box(&rsb).acquire())))),
                ns_per_op(|| drop(black_box(now(black_box(&ts).acquire())))),
                ns_per_op(|| drop(black_box(now(black_box(&als).acquire())))),
            ],
            higher_is_better: false,
        },
        Row {
            name: "semaphore, 4 overlapping permits, acquire+release".into(),
            unit: "ns/op",
            values: [
                overlapping(|| now(black_box(&rs4).acquire())),
                overlapping(|| now(black_box(&rsb4).acquire())),
                overlapping(|| now(black_box(&ts4).acquire())),
                overlapping(|| now(black_box(&als4).acquire())),
            ],
            higher_is_better: false,
        },
    ];

    let only = std::env::var("RONDO_BENCH_SYNC").unwrap_or_default();
    let workers = common::workers();
    if only != "weighted" && only != "inherit" {
        // `RONDO_BENCH_SYNC=uncontended` stops after these rows (a quick check of the fast paths).
        if only != "uncontended" {
            push_contended_rows(&mut rows, workers);
        }
        print_rows(workers, rows);
        print_group_fair_uncontended();
    }
    if only.is_empty() || only == "weighted" {
        print_weighted(workers);
    }
    if only.is_empty() || only == "weighted" || only == "inherit" {
        print_inherit(workers);
    }
}

/// `RONDO_BENCH_SYNC=icount`: one uncontended acquire+release variant, `RONDO_ICOUNT_N` times
/// (default 1,000,000), for counting instructions under callgrind: run it with `N` and with 0, and
/// divide the difference by `N`. `RONDO_ICOUNT_OP` is `fair-` or `gf-` (`new` or `group_fair`)
/// followed by `shared`, `exclusive` or `semaphore`; `RONDO_ICOUNT_WHERE=group` runs it in a task
/// of a group (weight 1, on a 1-worker rondo runtime), otherwise on this thread, outside any group.
fn icount() {
    fn run(op: &str, n: u32) {
        let (fl, gl) = (
            AsyncOneManyLock::new(0u64),
            AsyncOneManyLock::group_fair(0u64),
        );
        let (fs, gs) = (Semaphore::new(1), Semaphore::group_fair(1).unwrap());
        let (lock, sem) = if op.starts_with("gf-") {
            (&gl, &gs)
        } else {
            (&fl, &fs)
        };
        let repeat = |body: &dyn Fn()| (0..n).for_each(|_| body());
        match op.split_once('-').map_or("", |(_, k)| k) {
            "shared" => repeat(&|| drop(black_box(now(black_box(lock).shared())))),
            "exclusive" => repeat(&|| drop(black_box(now(black_box(lock).exclusive())))),
            "semaphore" => repeat(&|| drop(black_box(now(black_box(sem).acquire())))),
            other => panic!("RONDO_ICOUNT_OP: unknown operation {other:?}"),
        }
    }
    let op = std::env::var("RONDO_ICOUNT_OP").unwrap_or_else(|_| "gf-semaphore".into());
    let n: u32 = std::env::var("RONDO_ICOUNT_N").map_or(1_000_000, |v| {
        v.parse().expect("RONDO_ICOUNT_N must be a whole number")
    });
    let rt = common::rondo_runtime(1);
    if std::env::var("RONDO_ICOUNT_WHERE").as_deref() == Ok("group") {
        let group = rt.group().weight(1).build().unwrap();
        rt.block_on(group.spawn(async move { run(&op, n) }))
            .unwrap();
    } else {
        run(&op, n);
    }
}

/// Rounds of the group-fair uncontended table; each variant's figure is its best round.
const GROUP_FAIR_ROUNDS: usize = 3;

/// The uncontended rows for the group-fair constructors beside the fair ones (`new`), measured
/// both outside any group (this thread) and inside a task of a group (weight 1, on a 1-worker
/// rondo runtime), where the group-fair fast paths also check whose holds go uncounted (weight
/// inheritance). The variants are interleaved round by round; best round of
/// `GROUP_FAIR_ROUNDS`, each round `ns_per_op`'s best of `RUNS`.
fn print_group_fair_uncontended() {
    fn measure() -> [f64; 6] {
        let fl = AsyncOneManyLock::new(0u64);
        let fs = Semaphore::new(1);
        let gl = AsyncOneManyLock::group_fair(0u64);
        let gs = Semaphore::group_fair(1).unwrap();
        [
            ns_per_op(|| drop(black_box(now(black_box(&fl).shared())))),
            ns_per_op(|| drop(black_box(now(black_box(&gl).shared())))),
            ns_per_op(|| drop(black_box(now(black_box(&fl).exclusive())))),
            ns_per_op(|| drop(black_box(now(black_box(&gl).exclusive())))),
            ns_per_op(|| drop(black_box(now(black_box(&fs).acquire())))),
            ns_per_op(|| drop(black_box(now(black_box(&gs).acquire())))),
        ]
    }
    let rt = common::rondo_runtime(1);
    let group = rt.group().weight(1).build().unwrap();
    let mut outside = [f64::MAX; 6];
    let mut inside = [f64::MAX; 6];
    for _ in 0..GROUP_FAIR_ROUNDS {
        for (best, got) in outside.iter_mut().zip(measure()) {
            *best = best.min(got);
        }
        let got = rt.block_on(group.spawn(async { measure() })).unwrap();
        for (best, got) in inside.iter_mut().zip(got) {
            *best = best.min(got);
        }
    }
    println!();
    println!("group-fair against fair (`new`), uncontended acquire+release, ns/op:");
    println!("| row | where | fair | group-fair | difference |");
    println!("|---|---|---:|---:|---:|");
    for (where_, v) in [
        ("outside any group", outside),
        ("in a group's task", inside),
    ] {
        for (i, row) in ["shared", "exclusive", "semaphore"].iter().enumerate() {
            let (fair, gf) = (v[2 * i], v[2 * i + 1]);
            println!(
                "| {row} | {where_} | {fair:.1} | {gf:.1} | {:+.1} |",
                gf - fair
            );
        }
    }
}

const WEIGHTED_RUNS: usize = 5;

/// The primitives of the weighted rows, as one enum so that every contender runs the same task.
#[derive(Clone)]
enum Shared {
    Sem(Arc<Semaphore>),
    Lock(Arc<AsyncOneManyLock<u64>>),
    TokioSem(Arc<tokio::sync::Semaphore>),
    TokioLock(Arc<tokio::sync::RwLock<u64>>),
    AlSem(Arc<async_lock::Semaphore>),
    AlLock(Arc<async_lock::RwLock<u64>>),
}

impl Shared {
    /// The semaphore (`lock == false`) or the lock of column `col`: rondo group-fair, rondo fair,
    /// tokio, async-lock.
    fn make(col: usize, lock: bool) -> Self {
        match (col, lock) {
            (0, false) => Shared::Sem(Arc::new(Semaphore::group_fair(2).unwrap())),
            (1, false) => Shared::Sem(Arc::new(Semaphore::new(2))),
            (2, false) => Shared::TokioSem(Arc::new(tokio::sync::Semaphore::new(2))),
            (3, false) => Shared::AlSem(Arc::new(async_lock::Semaphore::new(2))),
            (0, true) => Shared::Lock(Arc::new(AsyncOneManyLock::group_fair(0))),
            (1, true) => Shared::Lock(Arc::new(AsyncOneManyLock::new(0))),
            (2, true) => Shared::TokioLock(Arc::new(tokio::sync::RwLock::new(0))),
            _ => Shared::AlLock(Arc::new(async_lock::RwLock::new(0))),
        }
    }

    /// Acquires once, logs the grant, spins 300 µs and sleeps 1 ms holding it, releases.
    async fn hold(self, log: Arc<std::sync::Mutex<Vec<bool>>>, light: bool) {
        let work = || async {
            log.lock().unwrap().push(light);
            common::spin(Duration::from_micros(300));
            rondo::time::sleep(Duration::from_millis(1)).await;
        };
        match self {
            Shared::Sem(s) => {
                let _p = s.acquire().await.unwrap();
                work().await;
            }
            Shared::Lock(l) => {
                let _g = l.exclusive().await;
                work().await;
            }
            Shared::TokioSem(s) => {
                let _p = s.acquire().await.unwrap();
                work().await;
            }
            Shared::TokioLock(l) => {
                let _g = l.write().await;
                work().await;
            }
            Shared::AlSem(s) => {
                let _p = s.acquire().await;
                work().await;
            }
            Shared::AlLock(l) => {
                let _g = l.write().await;
                work().await;
            }
        }
    }
}

/// One run of the weighted scenario on `shared`: the weight-1 group's count among the first 100
/// grants.
fn weighted_run(rt: &rondo::Runtime, shared: &Shared) -> usize {
    let heavy = rt.group().weight(6).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let log = Arc::new(std::sync::Mutex::new(Vec::with_capacity(200)));
    let handles: Vec<_> = (0..200)
        .map(|i| {
            let is_light = i % 2 == 1;
            let g = if is_light { &light } else { &heavy };
            g.spawn(shared.clone().hold(Arc::clone(&log), is_light))
        })
        .collect();
    rt.block_on(async {
        for h in handles {
            h.await.unwrap();
        }
    });
    let log = log.lock().unwrap();
    log.iter().take(100).filter(|&&l| l).count()
}

/// The weighted table: each row's median and range over `WEIGHTED_RUNS` runs, per contender.
fn print_weighted(workers: usize) {
    let rt = common::rondo_runtime(workers);
    println!(
        "\nweight-1 group's grants among the first 100 (weights 6 and 1, 100 tasks each; by weight: \
         14), {workers} workers on {} cores, {WEIGHTED_RUNS} runs: median (min-max)",
        common::cores()
    );
    println!(
        "| {:<34} | {:>13} | {:>13} | {:>13} | {:>13} |",
        "benchmark", "group-fair", "rondo fair", "tokio", "async-lock"
    );
    println!(
        "|{:-<36}|{:->15}|{:->15}|{:->15}|{:->15}|",
        "", "", "", "", ""
    );
    for (name, lock) in [
        ("weighted semaphore, 2 permits", false),
        ("weighted lock, write mode", true),
    ] {
        let mut counts: [Vec<usize>; 4] = Default::default();
        for _ in 0..WEIGHTED_RUNS {
            for (col, c) in counts.iter_mut().enumerate() {
                c.push(weighted_run(&rt, &Shared::make(col, lock)));
            }
        }
        let cell = |c: &mut Vec<usize>| {
            c.sort_unstable();
            format!("{} ({}-{})", c[c.len() / 2], c[0], c[c.len() - 1])
        };
        println!(
            "| {:<34} | {:>13} | {:>13} | {:>13} | {:>13} |",
            name,
            cell(&mut counts[0]),
            cell(&mut counts[1]),
            cell(&mut counts[2]),
            cell(&mut counts[3])
        );
    }
}

const INHERIT_RUNS: usize = 5;
/// L's critical section: CPU work, in polls of `INHERIT_POLL`.
const INHERIT_WORK: Duration = Duration::from_millis(20);
const INHERIT_POLL: Duration = Duration::from_millis(1);

/// Spins until the calling thread has burned `d` of CPU time.
fn cpu_spin(d: Duration) {
    let start = common::thread_cpu();
    while common::thread_cpu() - start < d {
        std::hint::spin_loop();
    }
}

/// Holds `shared` (the lock in write mode, or a permit) while `work` runs.
async fn holding(shared: Shared, work: impl Future<Output = ()>) {
    match shared {
        Shared::Sem(s) => {
            let _p = s.acquire().await.unwrap();
            work.await;
        }
        Shared::Lock(lock) => {
            let _g = lock.exclusive().await;
            work.await;
        }
        _ => unreachable!("the inheritance rows run rondo's primitives"),
    }
}

/// One run of the inheritance scenario on `shared`: H's wait ÷ L's critical section, and L's
/// share of the CPU that L and F used while H waited.
fn inherit_run(rt: &rondo::Runtime, workers: usize, shared: &Shared) -> (f64, f64) {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
    let l = rt.group().weight(1).build().unwrap();
    let f = rt.group().weight(10).build().unwrap();
    let h = rt.group().weight(100).build().unwrap();
    let (held, waiting) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let (granted, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    // F's polls while H waits (each `INHERIT_POLL` of CPU).
    let f_polls = Arc::new(AtomicU64::new(0));
    // F floods the workers first.
    let flood: Vec<_> = (0..4 * workers)
        .map(|_| {
            let (stop, waiting, granted) = (stop.clone(), waiting.clone(), granted.clone());
            let f_polls = f_polls.clone();
            f.spawn(async move {
                while !stop.load(SeqCst) {
                    cpu_spin(INHERIT_POLL);
                    if waiting.load(SeqCst) && !granted.load(SeqCst) {
                        f_polls.fetch_add(1, SeqCst);
                    }
                    rondo::task::yield_now().await;
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(10));
    // L takes the primitive, waits for H to wait, then works through its critical section.
    let holder = {
        let (held, waiting) = (held.clone(), waiting.clone());
        l.spawn(holding(shared.clone(), async move {
            held.store(true, SeqCst);
            while !waiting.load(SeqCst) {
                rondo::task::yield_now().await;
            }
            let mut done = Duration::ZERO;
            while done < INHERIT_WORK {
                cpu_spin(INHERIT_POLL);
                done += INHERIT_POLL;
                rondo::task::yield_now().await;
            }
        }))
    };
    while !held.load(SeqCst) {
        std::thread::yield_now();
    }
    let waiter = {
        let (shared, waiting, granted) = (shared.clone(), waiting.clone(), granted.clone());
        h.spawn(async move {
            let t0 = Instant::now();
            let mut acquire = pin!(holding(shared, async {}));
            // Polled once (it joins the line) before L starts its work.
            let first = futures::poll!(acquire.as_mut());
            waiting.store(true, SeqCst);
            if first.is_pending() {
                acquire.await;
            }
            let wait = t0.elapsed();
            granted.store(true, SeqCst);
            wait
        })
    };
    let wait = rt.block_on(async {
        let wait = waiter.await.unwrap();
        holder.await.unwrap();
        stop.store(true, SeqCst);
        for t in flood {
            t.await.unwrap();
        }
        wait
    });
    let l_polls = (INHERIT_WORK.as_nanos() / INHERIT_POLL.as_nanos()) as f64;
    let share = l_polls / (l_polls + f_polls.load(SeqCst) as f64);
    (wait.as_secs_f64() / INHERIT_WORK.as_secs_f64(), share)
}

/// The inheritance table: H's wait ÷ L's critical section and L's CPU share while H waits,
/// group-fair (the holder inherits H's weight) against fair (it keeps its own); median and range
/// of `INHERIT_RUNS` runs.
fn print_inherit(workers: usize) {
    let rt = common::rondo_runtime(workers);
    println!(
        "\nweight inheritance: L (weight 1) holds through 20 ms of CPU in 1 ms polls, F (weight 10) \
         floods, H (weight 100) waits; {workers} workers on {} cores, {INHERIT_RUNS} runs: median \
         (min-max)",
        common::cores()
    );
    println!(
        "| {:<30} | {:>17} | {:>17} | {:>17} | {:>17} |",
        "benchmark", "wait/20ms, with", "wait/20ms, without", "L share, with", "L share, without"
    );
    println!(
        "|{:-<32}|{:->19}|{:->20}|{:->19}|{:->19}|",
        "", "", "", "", ""
    );
    for (name, lock) in [
        ("inheritance, lock, write mode", true),
        ("inheritance, semaphore, 1", false),
    ] {
        let mut ratios: [Vec<f64>; 2] = Default::default();
        let mut shares: [Vec<f64>; 2] = Default::default();
        for _ in 0..INHERIT_RUNS {
            for col in 0..2 {
                let shared = match (col, lock) {
                    (0, true) => Shared::Lock(Arc::new(AsyncOneManyLock::group_fair(0))),
                    (_, true) => Shared::Lock(Arc::new(AsyncOneManyLock::new(0))),
                    (0, false) => Shared::Sem(Arc::new(Semaphore::group_fair(1).unwrap())),
                    (_, false) => Shared::Sem(Arc::new(Semaphore::new(1))),
                };
                let (ratio, share) = inherit_run(&rt, workers, &shared);
                ratios[col].push(ratio);
                shares[col].push(share);
            }
        }
        let cell = |r: &mut Vec<f64>| {
            r.sort_by(f64::total_cmp);
            format!("{:.2} ({:.2}-{:.2})", r[r.len() / 2], r[0], r[r.len() - 1])
        };
        println!(
            "| {:<30} | {:>17} | {:>18} | {:>17} | {:>17} |",
            name,
            cell(&mut ratios[0]),
            cell(&mut ratios[1]),
            cell(&mut shares[0]),
            cell(&mut shares[1])
        );
    }
}

/// Runs every contended workload on one tokio runtime with `workers` workers.
fn push_contended_rows(rows: &mut Vec<Row>, workers: usize) {
    let rt = common::tokio_runtime(workers);
    let spins = calibrate_1us();
    for (name, write_every) in [
        ("rw 90/10, 10 tasks x 1000, 1us held", 10),
        ("rw 50/50, 10 tasks x 1000, 1us held", 2),
    ] {
        let load = RwLoad {
            tasks: 10,
            ops: 1_000,
            write_every,
            work: Work::Spin(spins),
        };
        push_contended(rows, name, best_of(|who| rw_run(&rt, who, &load)));
    }
    let load = SemLoad {
        tasks: 100,
        ops: 1_000,
        permits: 10,
        spins,
        yield_held: false,
    };
    push_contended(
        rows,
        "semaphore, 100 tasks x 1000 on 10 permits",
        best_of(|who| sem_run(&rt, who, &load)),
    );
    let load = RwLoad {
        tasks: 4 * workers,
        ops: 2_000,
        write_every: 10,
        work: Work::Adds,
    };
    push_contended(
        rows,
        "rw 90/10, 4 tasks/worker x 2000, 50 adds",
        best_of(|who| rw_run(&rt, who, &load)),
    );
    let load = SemLoad {
        tasks: 8 * workers,
        ops: 1_000,
        permits: workers,
        spins: 0,
        yield_held: true,
    };
    push_contended(
        rows,
        "semaphore, 8 tasks/worker, 1 permit/worker",
        best_of(|who| sem_run(&rt, who, &load)),
    );
}

fn print_rows(workers: usize, rows: Vec<Row>) {
    println!(
        "{workers} workers on {} cores, barging bound {:?}",
        common::cores(),
        bound()
    );
    println!(
        "| {:<42} | {:<13} | {:>12} | {:>12} | {:>12} | {:>12} | {:>9} | {:>9} |",
        "benchmark",
        "unit",
        "rondo fair",
        "rondo barge",
        "tokio",
        "async-lock",
        "fair/best",
        "barge/best"
    );
    println!(
        "|{:-<44}|{:-<15}|{:->14}|{:->14}|{:->14}|{:->14}|{:->11}|{:->11}|",
        "", "", "", "", "", "", "", ""
    );
    for r in rows {
        let [fair, barging, tokio, al] = r.values;
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
            "| {:<42} | {:<13} | {:>12} | {:>12} | {:>12} | {:>12} | {:>9.2} | {:>9.2} |",
            r.name,
            r.unit,
            fmt(fair),
            fmt(barging),
            fmt(tokio),
            fmt(al),
            fair / best_peer,
            barging / best_peer
        );
    }
}
