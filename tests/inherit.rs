//! Weight inheritance, measured on a running runtime: while a task of a heavy group waits for a
//! group-fair lock or semaphore held by a task of a light group, the holder's group is served at
//! the waiter's weight (and charged for it); before the waiter comes and once it is gone, at its
//! own weight.
//!
//! L (weight 1) and F (weight 10) each keep the workers busy with CPU-bound tasks (50 µs polls,
//! yielding between); one more task of L holds the primitive. Shares are counted in thread CPU
//! time by the tasks themselves, in three phases: nobody waits (L gets about 1/11), a task of H
//! (weight 100) waits (L is served at 100 against F's 10: about 10/11), the waiter is gone
//! (about 1/11 again: the loan ended). The loan ends by the waiter's cancellation (its task
//! aborted) or by the holder's release (the waiter granted). At 1, 2, 4 and 8 workers. The rule
//! tests (when each loan starts and ends, exactly once) are the library's unit tests
//! (`sync::inherit_tests`).
#![cfg(not(loom))]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::Duration;

use common::{thread_cpu, watchdog};
use rondo::sync::{AsyncOneManyLock, Semaphore};

const PHASE: Duration = Duration::from_millis(300);

/// One scenario at a time: each measures shares of the whole machine.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Spins in 50 µs polls of CPU time, yielding between, adding each poll's CPU time to `total`.
async fn spinner(total: Arc<AtomicU64>, stop: Arc<AtomicBool>) {
    while !stop.load(SeqCst) {
        let start = thread_cpu();
        let mut burned = Duration::ZERO;
        while burned < Duration::from_micros(50) {
            std::hint::spin_loop();
            burned = thread_cpu() - start;
        }
        total.fetch_add(burned.as_nanos() as u64, SeqCst);
        rondo::task::yield_now().await;
    }
}

#[derive(Clone)]
enum Shared {
    Lock(Arc<AsyncOneManyLock<()>>),
    Sem(Arc<Semaphore>),
}

impl Shared {
    /// Holds the primitive until `until` completes.
    async fn hold_until(self, until: impl std::future::Future<Output = ()>) {
        match self {
            Shared::Lock(l) => {
                let _g = l.exclusive().await;
                until.await;
            }
            Shared::Sem(s) => {
                let _p = s.acquire().await.unwrap();
                until.await;
            }
        }
    }
}

/// How a phase-B waiter goes away.
#[derive(Clone, Copy, Debug)]
enum End {
    /// Its task is aborted while it waits.
    Cancel,
    /// The holder releases; the waiter is granted, and releases at once.
    Release,
}

/// L's share of the CPU L and F used in each phase: (before, while H waits, after).
fn shares(workers: usize, shared: Shared, end: End) -> [f64; 3] {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let rt = rondo::Runtime::builder()
        .worker_threads(workers)
        .build()
        .unwrap();
    let l = rt.group().weight(1).build().unwrap();
    let f = rt.group().weight(10).build().unwrap();
    let h = rt.group().weight(100).build().unwrap();
    let (l_cpu, f_cpu) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let (release, released) = futures::channel::oneshot::channel::<()>();
    let (held_tx, held_rx) = std::sync::mpsc::channel();
    let holder = l.spawn(shared.clone().hold_until(async move {
        held_tx.send(()).unwrap();
        let _ = released.await;
    }));
    held_rx.recv().unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 * workers {
        tasks.push(l.spawn(spinner(l_cpu.clone(), stop.clone())));
        tasks.push(f.spawn(spinner(f_cpu.clone(), stop.clone())));
    }
    let phase = || {
        let (l0, f0) = (l_cpu.load(SeqCst), f_cpu.load(SeqCst));
        std::thread::sleep(PHASE);
        let (dl, df) = (l_cpu.load(SeqCst) - l0, f_cpu.load(SeqCst) - f0);
        dl as f64 / (dl + df).max(1) as f64
    };
    // Settle, then measure each phase.
    std::thread::sleep(PHASE / 4);
    let before = phase();
    let (waiting_tx, waiting_rx) = std::sync::mpsc::channel();
    let waiter = h.spawn(async move {
        let mut acquire = std::pin::pin!(shared.hold_until(async {}));
        let first = futures::poll!(acquire.as_mut());
        waiting_tx.send(first.is_pending()).unwrap();
        acquire.await;
    });
    assert!(waiting_rx.recv().unwrap(), "H should wait for L's hold");
    let during = phase();
    match end {
        End::Cancel => {
            waiter.abort();
            assert!(rt.block_on(waiter).unwrap_err().is_cancelled());
            drop(release);
            rt.block_on(holder).unwrap();
        }
        End::Release => {
            release.send(()).unwrap();
            rt.block_on(holder).unwrap();
            rt.block_on(waiter).unwrap();
        }
    }
    std::thread::sleep(PHASE / 4);
    let after = phase();
    stop.store(true, SeqCst);
    rt.block_on(async {
        for t in tasks {
            t.await.unwrap();
        }
    });
    [before, during, after]
}

fn check(name: &str, make: impl Fn() -> Shared, end: End) {
    for workers in [1, 2, 4, 8] {
        let [before, during, after] = shares(workers, make(), end);
        let msg = format!(
            "{name}, {end:?}, {workers} workers: L's share before {before:.2}, while H waits \
             {during:.2}, after {after:.2} (by weight: 0.09, 0.91, 0.09)"
        );
        assert!(
            during > 0.6,
            "the holder's group is not served at H's weight: {msg}"
        );
        assert!(before < 0.4, "{msg}");
        assert!(after < 0.4, "the loan did not end: {msg}");
    }
}

fn lock() -> Shared {
    Shared::Lock(Arc::new(AsyncOneManyLock::group_fair(())))
}

fn semaphore() -> Shared {
    Shared::Sem(Arc::new(Semaphore::group_fair(1).unwrap()))
}

#[test]
fn a_lock_holder_is_served_at_its_waiters_weight_until_the_waiter_is_cancelled() {
    watchdog(120, || check("group-fair lock", lock, End::Cancel));
}

#[test]
fn a_lock_holder_is_served_at_its_waiters_weight_until_it_releases() {
    watchdog(120, || check("group-fair lock", lock, End::Release));
}

#[test]
fn a_semaphore_holder_is_served_at_its_waiters_weight_until_it_releases() {
    watchdog(120, || {
        check("group-fair semaphore", semaphore, End::Release)
    });
}

/// The same with a fair lock, which lends nothing: L stays at its own weight while H waits. This
/// is what the tests above would see without weight inheritance.
#[test]
fn a_fair_lock_holder_keeps_its_own_weight() {
    watchdog(120, || {
        for workers in [1, 2] {
            let fair = || Shared::Lock(Arc::new(AsyncOneManyLock::new(())));
            let [_, during, _] = shares(workers, fair(), End::Release);
            assert!(
                during < 0.4,
                "{workers} workers: a fair lock's holder got {during:.2} while H waited"
            );
        }
    });
}
