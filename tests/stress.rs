//! Exact-accounting stress tests, through the public API only.
//!
//! They run at a size that takes seconds in the normal suite; with `RONDO_STRESS_FULL=1` (set by
//! `scripts/verify`) they run at full size: 1,000,000 tasks across 100 groups, 200 runtimes dropped
//! mid-flood, 10,000 panicking tasks and 1,000 runtime create and drop cycles, each with 1, 2, 4
//! and 8 workers (oversubscribed on a 2-core machine). They check invariants only, never timings:
//! every future is dropped exactly once, every `JoinHandle` resolves exactly once with a variant
//! the task's history allows, no worker thread and no runtime state outlives its runtime.
#![cfg(not(loom))]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, mpsc};

use common::{eventually, rt, watchdog};
use futures::channel::oneshot;

const WORKERS: [usize; 4] = [1, 2, 4, 8];
const GROUPS: usize = 100;

/// True when `RONDO_STRESS_FULL` asks for the full-size run.
fn full() -> bool {
    std::env::var_os("RONDO_STRESS_FULL").is_some_and(|v| v != "0" && !v.is_empty())
}

/// The tests of this file run one at a time: the thread count of the process is part of what
/// they check, and each one already oversubscribes the machine.
fn serial() -> MutexGuard<'static, ()> {
    static SERIAL: Mutex<()> = Mutex::new(());
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// The watchdog's limit for one worker count, in seconds: generous, only a hang should hit it.
fn limit() -> u64 {
    if full() { 1800 } else { 300 }
}

/// `quick` in the normal suite, `miri` under Miri (which runs about a thousand times slower),
/// `full` when asked for.
fn size(miri: usize, quick: usize, full_size: usize) -> usize {
    if full() {
        full_size
    } else if cfg!(miri) {
        miri
    } else {
        quick
    }
}

/// A small deterministic PRNG (SplitMix64): reproducible runs without a dependency.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n`.
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Counts one drop of task `id`'s future.
struct Dropped {
    drops: Arc<Vec<AtomicU8>>,
    id: usize,
}

impl Drop for Dropped {
    fn drop(&mut self) {
        self.drops[self.id].fetch_add(1, Ordering::SeqCst);
    }
}

fn counters(n: usize) -> Arc<Vec<AtomicU8>> {
    Arc::new((0..n).map(|_| AtomicU8::new(0)).collect())
}

/// Asserts every counter in `c[..n]` is exactly 1.
fn assert_all_once(c: &[AtomicU8], n: usize, what: &str) {
    for (id, v) in c[..n].iter().enumerate() {
        let v = v.load(Ordering::SeqCst);
        assert_eq!(v, 1, "task {id}: {what} {v} times, expected exactly once");
    }
}

// ---------------------------------------------------------------------------------------------
// 1. Every future dropped once, every handle resolved once with an allowed variant.
// ---------------------------------------------------------------------------------------------

/// What a task does, drawn from its id.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    /// Yields 0 to 2 times, then completes.
    Quick,
    /// Spawns 1 to 3 children into its own group (their handles go to the collector), yields,
    /// then completes.
    Parent,
    /// Waits for a wake from a foreign thread, then completes.
    Foreign,
    /// Waits forever: only an abort or a group cancel ends it.
    Forever,
}

fn kind_of(id: usize) -> Kind {
    match Rng::new(id as u64 ^ 0x5EED).below(10) {
        0..=3 => Kind::Quick,
        4..=5 => Kind::Parent,
        6..=8 => Kind::Foreign,
        _ => Kind::Forever,
    }
}

fn output_of(id: usize) -> u64 {
    (id as u64).wrapping_mul(0x2545_F491_4F6C_DD1D)
}

struct Accounting {
    capacity: usize,
    next_id: AtomicUsize,
    drops: Arc<Vec<AtomicU8>>,
    /// Set by the future itself right before it returns `Ready`.
    completed: Vec<AtomicBool>,
    /// Set before `abort()` is called on the task's handle.
    aborted: Vec<AtomicBool>,
    /// The group index of each task.
    group: Vec<AtomicUsize>,
    /// Set before `Group::cancel()` is called.
    group_cancelled: Vec<AtomicBool>,
    resolved: Vec<AtomicU8>,
    /// Handles of nested spawns, for the main thread to check.
    collector: Mutex<mpsc::Sender<(usize, rondo::JoinHandle<u64>)>>,
    /// Foreign wakers: a pool of plain threads completes these.
    foreign: Mutex<mpsc::Sender<oneshot::Sender<()>>>,
}

impl Accounting {
    fn alloc_id(&self) -> Option<usize> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        (id < self.capacity).then_some(id)
    }
}

type BoxFuture = Pin<Box<dyn Future<Output = u64> + Send>>;

fn tracked_task(acc: Arc<Accounting>, id: usize) -> BoxFuture {
    let guard = Dropped {
        drops: acc.drops.clone(),
        id,
    };
    Box::pin(async move {
        let _guard = guard;
        let mut rng = Rng::new(id as u64);
        match kind_of(id) {
            Kind::Quick => {
                for _ in 0..rng.below(3) {
                    rondo::yield_now().await;
                }
            }
            Kind::Parent => {
                for _ in 0..1 + rng.below(3) {
                    let Some(child) = acc.alloc_id() else { break };
                    acc.group[child].store(acc.group[id].load(Ordering::SeqCst), Ordering::SeqCst);
                    // Spawn and hand over in one step (no suspension point between), so the
                    // handle is never lost to a cancellation of this task.
                    let h = rondo::spawn(tracked_task(acc.clone(), child));
                    acc.collector.lock().unwrap().send((child, h)).unwrap();
                }
                rondo::yield_now().await;
            }
            Kind::Foreign => {
                let (tx, rx) = oneshot::channel();
                acc.foreign.lock().unwrap().send(tx).unwrap();
                rx.await.expect("the foreign pool dropped a waker");
            }
            Kind::Forever => std::future::pending::<()>().await,
        }
        acc.completed[id].store(true, Ordering::SeqCst);
        output_of(id)
    })
}

/// Awaits `h` and checks its outcome against what happened to task `id`.
fn check_outcome(acc: &Accounting, id: usize, r: Result<u64, rondo::JoinError>) {
    assert_eq!(
        acc.resolved[id].fetch_add(1, Ordering::SeqCst),
        0,
        "task {id}: handle resolved twice"
    );
    let aborted = acc.aborted[id].load(Ordering::SeqCst);
    let cancelled =
        acc.group_cancelled[acc.group[id].load(Ordering::SeqCst)].load(Ordering::SeqCst);
    let completed = acc.completed[id].load(Ordering::SeqCst);
    match r {
        Ok(v) => {
            assert!(
                completed,
                "task {id}: Ok but its future never returned Ready"
            );
            assert_eq!(v, output_of(id), "task {id}: wrong output");
        }
        Err(e) => {
            assert!(e.is_cancelled(), "task {id}: unexpected error {e:?}");
            assert!(
                aborted || cancelled,
                "task {id} ({:?}) was cancelled but neither aborted nor in a cancelled group",
                kind_of(id)
            );
            assert!(
                !completed,
                "task {id}: its future returned Ready, yet the handle says cancelled"
            );
        }
    }
    if kind_of(id) == Kind::Forever {
        assert!(!completed, "task {id}: a forever task completed");
    }
}

fn exact_accounting(workers: usize, capacity: usize, seed: u64) {
    let rt = rt(workers);
    let groups: Vec<rondo::Group> = (0..GROUPS)
        .map(|i| rt.group().name(format!("g{i}")).build().unwrap())
        .collect();
    let (collector_tx, collector_rx) = mpsc::channel();
    let (foreign_tx, foreign_rx) = mpsc::channel::<oneshot::Sender<()>>();
    let acc = Arc::new(Accounting {
        capacity,
        next_id: AtomicUsize::new(0),
        drops: counters(capacity),
        completed: (0..capacity).map(|_| AtomicBool::new(false)).collect(),
        aborted: (0..capacity).map(|_| AtomicBool::new(false)).collect(),
        group: (0..capacity).map(|_| AtomicUsize::new(0)).collect(),
        group_cancelled: (0..GROUPS).map(|_| AtomicBool::new(false)).collect(),
        resolved: (0..capacity).map(|_| AtomicU8::new(0)).collect(),
        collector: Mutex::new(collector_tx),
        foreign: Mutex::new(foreign_tx),
    });
    // Two foreign threads wake the `Foreign` tasks, in batches so some wakes race the task's
    // own progress.
    let foreign_rx = Arc::new(Mutex::new(foreign_rx));
    let wakers: Vec<_> = (0..2)
        .map(|_| {
            let rx = foreign_rx.clone();
            std::thread::spawn(move || {
                loop {
                    let next = rx.lock().unwrap().recv();
                    match next {
                        Ok(tx) => {
                            let _ = tx.send(());
                        }
                        Err(_) => return,
                    }
                }
            })
        })
        .collect();

    let mut rng = Rng::new(seed);
    let top = capacity / 2;
    let mut handles: Vec<(usize, rondo::JoinHandle<u64>)> = Vec::with_capacity(top);
    // Ten groups are cancelled at spread-out moments of the spawning.
    let cancel_at: Vec<usize> = (0..10).map(|k| (k + 1) * top / 11).collect();
    for i in 0..top {
        if let Some(k) = cancel_at.iter().position(|&c| c == i) {
            let g = k * 10; // groups 0, 10, 20, ...
            acc.group_cancelled[g].store(true, Ordering::SeqCst);
            groups[g].cancel();
        }
        let Some(id) = acc.alloc_id() else { break };
        let g = rng.below(GROUPS);
        acc.group[id].store(g, Ordering::SeqCst);
        handles.push((id, groups[g].spawn(tracked_task(acc.clone(), id))));
        // Abort about 1 in 20 tasks spawned so far, a random one: queued, running, waiting or
        // already completed.
        if rng.below(20) == 0 {
            let (victim, h) = &handles[rng.below(handles.len())];
            acc.aborted[*victim].store(true, Ordering::SeqCst);
            h.abort();
        }
    }

    // Resolve every handle, the top-level ones and each nested spawn as it arrives. A forever
    // task is aborted first unless its group was cancelled.
    let resolve = |id: usize, h: rondo::JoinHandle<u64>| {
        let g = acc.group[id].load(Ordering::SeqCst);
        if kind_of(id) == Kind::Forever && !acc.group_cancelled[g].load(Ordering::SeqCst) {
            acc.aborted[id].store(true, Ordering::SeqCst);
            h.abort();
        }
        let r = rt.block_on(h);
        check_outcome(&acc, id, r);
    };
    for (id, h) in handles {
        resolve(id, h);
    }
    // Every top-level task has finished; its children were handed over before it did, and
    // theirs before they did, so the collector drains to empty.
    while let Ok((id, h)) = collector_rx.try_recv() {
        resolve(id, h);
    }
    let spawned = acc.next_id.load(Ordering::SeqCst).min(capacity);
    assert_all_once(&acc.resolved, spawned, "handle resolved");
    // A resolved handle means the task is finished; its future is dropped no later than the
    // runtime's shutdown.
    drop(groups);
    drop(rt);
    assert_all_once(&acc.drops, spawned, "future dropped");
    for id in spawned..capacity {
        assert_eq!(acc.drops[id].load(Ordering::SeqCst), 0);
    }
    // Stop the foreign pool: every task (and so every clone of the sender) is gone.
    drop(acc);
    for t in wakers {
        t.join().unwrap();
    }
    assert!(
        spawned > top,
        "the run should include nested spawns ({spawned} tasks for {top} top-level ones)"
    );
}

#[test]
fn every_future_dropped_once_and_every_handle_resolved_once() {
    let _serial = serial();
    let capacity = size(60, 50_000, 1_000_000);
    for (i, &w) in WORKERS.iter().enumerate() {
        watchdog(limit(), move || {
            exact_accounting(w, capacity, 0xACC0 + i as u64)
        });
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Shutdown while busy.
// ---------------------------------------------------------------------------------------------

/// A busy task: yields a few times, sometimes spawns a child (counted the same way), sometimes
/// waits forever.
fn busy_task(drops: Arc<Vec<AtomicU8>>, next: Arc<AtomicUsize>, id: usize) -> BoxFuture {
    let guard = Dropped {
        drops: drops.clone(),
        id,
    };
    Box::pin(async move {
        let _guard = guard;
        let mut rng = Rng::new(id as u64);
        for _ in 0..rng.below(20) {
            rondo::yield_now().await;
            if rng.below(8) == 0 {
                let child = next.fetch_add(1, Ordering::SeqCst);
                if child < drops.len() {
                    drop(rondo::spawn(busy_task(drops.clone(), next.clone(), child)));
                }
            }
        }
        if rng.below(4) == 0 {
            std::future::pending::<()>().await;
        }
        id as u64
    })
}

fn shutdown_mid_flood(workers: usize, runtimes: usize, per_runtime: usize) {
    for round in 0..runtimes {
        let capacity = per_runtime * 2;
        let drops = counters(capacity);
        let next = Arc::new(AtomicUsize::new(0));
        let rt = rt(workers);
        let group = rt.group().name("flood").build().unwrap();
        let handle = rt.handle().clone();
        // A second thread floods the runtime through its handle while this one drops it.
        let flooder = {
            let (drops, next) = (drops.clone(), next.clone());
            std::thread::spawn(move || {
                let mut handles = Vec::new();
                for i in 0..per_runtime {
                    let id = next.fetch_add(1, Ordering::SeqCst);
                    if id >= drops.len() {
                        break;
                    }
                    let f = busy_task(drops.clone(), next.clone(), id);
                    let h = if i % 2 == 0 {
                        handle.spawn(f)
                    } else {
                        group.spawn(f)
                    };
                    handles.push(h);
                }
                handles
            })
        };
        // Drop it once the flood is well under way (or over, on a slow machine).
        let started = eventually(10, || next.load(Ordering::SeqCst) >= per_runtime / 4);
        assert!(started, "round {round}: the flood never started");
        drop(rt);
        let handles = flooder.join().unwrap();
        for h in handles {
            assert!(h.is_finished(), "round {round}: a handle outlived shutdown");
            match futures::executor::block_on(h) {
                Ok(_) => {}
                Err(e) => assert!(e.is_cancelled(), "round {round}: {e:?}"),
            }
        }
        let spawned = next.load(Ordering::SeqCst).min(capacity);
        assert_all_once(&drops, spawned, "future dropped");
    }
}

#[test]
fn shutdown_while_busy_drops_every_future_exactly_once() {
    let _serial = serial();
    let runtimes = size(2, 10, 200);
    let per_runtime = size(20, 2_000, 5_000);
    for &w in &WORKERS {
        watchdog(limit(), move || {
            shutdown_mid_flood(w, runtimes, per_runtime)
        });
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Panicking tasks while other groups keep being served.
// ---------------------------------------------------------------------------------------------

fn panics_and_service(workers: usize, panicking: usize) {
    let reported = Arc::new(AtomicUsize::new(0));
    let r = reported.clone();
    let rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .on_task_panic(move |p| {
            assert_eq!(p.group_name(), "panics");
            assert!(p.message().is_some_and(|m| m.starts_with("stress panic ")));
            r.fetch_add(1, Ordering::SeqCst);
        })
        .build()
        .unwrap();
    let bad = rt.group().name("panics").build().unwrap();
    let good: Vec<_> = (0..3)
        .map(|i| rt.group().name(format!("good{i}")).build().unwrap())
        .collect();
    let mut bad_handles = Vec::with_capacity(panicking);
    let mut good_handles = Vec::new();
    for i in 0..panicking {
        bad_handles.push(bad.spawn(async move {
            if i % 3 == 0 {
                rondo::yield_now().await;
            }
            panic!("stress panic {i}");
        }));
        // The other groups keep receiving work in between.
        if i % 10 == 0 {
            let g = &good[i % 3];
            good_handles.push(g.spawn(async move {
                rondo::yield_now().await;
                i * 2
            }));
        }
    }
    for (k, h) in good_handles.into_iter().enumerate() {
        assert_eq!(rt.block_on(h).unwrap(), k * 10 * 2);
    }
    for (i, h) in bad_handles.into_iter().enumerate() {
        let e = rt.block_on(h).unwrap_err();
        assert!(e.is_panic(), "task {i}: {e:?}");
        let payload = e.into_panic();
        let msg = payload.downcast_ref::<String>().unwrap();
        assert_eq!(*msg, format!("stress panic {i}"));
    }
    assert_eq!(reported.load(Ordering::SeqCst), panicking);
    // Every worker survived: all of them can still run work at once.
    let hs: Vec<_> = (0..workers * 4)
        .map(|i| rt.spawn(async move { i }))
        .collect();
    for (i, h) in hs.into_iter().enumerate() {
        assert_eq!(rt.block_on(h).unwrap(), i);
    }
}

#[test]
fn panicking_tasks_do_not_stop_other_groups() {
    let _serial = serial();
    let panicking = size(20, 1_000, 10_000);
    // The default hook would print 10,000 lines.
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let quiet = info
            .payload()
            .downcast_ref::<String>()
            .is_some_and(|m| m.starts_with("stress panic "));
        if !quiet {
            prev(info);
        }
    }));
    for &w in &WORKERS {
        watchdog(limit(), move || panics_and_service(w, panicking));
    }
}

// ---------------------------------------------------------------------------------------------
// 4. Create and drop cycles: no thread and no memory left behind.
// ---------------------------------------------------------------------------------------------

/// The name prefix of the worker threads of the create/drop cycles' runtimes.
const CYCLE_THREADS: &str = "rondo-cycle";

/// The number of threads of this process (entries of `/proc/self/task`) whose name starts with
/// `prefix`. Counting by name keeps the test harness's own threads, which come and go as tests
/// start and end, out of the count.
fn threads_named(prefix: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .expect("/proc/self/task is needed to count threads")
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with(prefix))
        .count()
}

/// Creates and drops `cycles` runtimes that ran `tasks` tasks to completion; checks that the
/// value captured by the panic hook is freed with each runtime and that no thread is left.
/// With `pending`, each runtime is dropped with that many tasks still waiting.
fn create_drop_cycles(workers: usize, cycles: usize, tasks: usize, pending: usize) {
    let captured = Arc::new(());
    assert_eq!(
        threads_named(CYCLE_THREADS),
        0,
        "another test left cycle threads"
    );
    for cycle in 0..cycles {
        let c = captured.clone();
        let rt = rondo::Runtime::builder()
            .worker_threads(workers)
            .thread_name(CYCLE_THREADS)
            .on_task_panic(move |_| {
                let _ = &c;
            })
            .build()
            .unwrap();
        if cycle == 0 {
            // The count sees the workers and the stall monitor while they live (so a leaked one
            // would be seen).
            assert!(
                eventually(10, || threads_named(CYCLE_THREADS) == workers + 1),
                "expected {workers} worker threads and the monitor, counted {}",
                threads_named(CYCLE_THREADS)
            );
        }
        let g = rt.group().name("cycle").build().unwrap();
        let hs: Vec<_> = (0..tasks)
            .map(|i| {
                g.spawn(async move {
                    rondo::yield_now().await;
                    i
                })
            })
            .collect();
        for (i, h) in hs.into_iter().enumerate() {
            assert_eq!(rt.block_on(h).unwrap(), i);
        }
        for _ in 0..pending {
            drop(g.spawn(std::future::pending::<()>()));
            drop(rt.spawn(std::future::pending::<()>()));
        }
        drop(g);
        drop(rt);
        assert_eq!(
            Arc::strong_count(&captured),
            1,
            "cycle {cycle}: the runtime's state outlived its drop"
        );
    }
    // Worker threads are joined by the drop; allow a moment for the OS to reap them.
    let settled = eventually(10, || threads_named(CYCLE_THREADS) == 0);
    assert!(
        settled,
        "thread leak: {} worker threads left after {cycles} runtimes were dropped",
        threads_named(CYCLE_THREADS)
    );
}

#[test]
fn create_and_drop_cycles_leak_no_thread_and_no_state() {
    let _serial = serial();
    let cycles = size(2, 100, 1_000);
    for &w in &WORKERS {
        watchdog(limit(), move || create_drop_cycles(w, cycles, 10, 0));
    }
}

#[test]
fn create_and_drop_cycles_with_pending_tasks_leak_no_state() {
    let _serial = serial();
    let cycles = size(2, 20, 200);
    for &w in &WORKERS {
        watchdog(limit(), move || create_drop_cycles(w, cycles, 10, 5));
    }
}

#[test]
fn the_prng_is_deterministic_and_spread() {
    let a: Vec<u64> = {
        let mut r = Rng::new(7);
        (0..4).map(|_| r.next()).collect()
    };
    let b: Vec<u64> = {
        let mut r = Rng::new(7);
        (0..4).map(|_| r.next()).collect()
    };
    assert_eq!(a, b);
    let mut hist = [0usize; 10];
    let mut r = Rng::new(1);
    for _ in 0..10_000 {
        hist[r.below(10)] += 1;
    }
    assert!(hist.iter().all(|&n| (800..1200).contains(&n)), "{hist:?}");
}
