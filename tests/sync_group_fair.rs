//! Group-fair `Semaphore` and `AsyncOneManyLock`: waiters are served by their groups' weights
//! (a weighted fair queue over the waiting groups, FIFO within a group).
//!
//! The rule tests are deterministic: each waiter's acquire is polled once inside a task of its
//! group (which puts it in line in that group's share), handed back to the test thread, and then
//! polled by hand, so the order of grants is exactly the queue's. The runtime tests (weighted
//! shares under load, stress) use `RONDO_TEST_WORKERS` for their multi-worker runs.
#![cfg(not(loom))]

mod common;

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::{Probe, rt, spin, watchdog};
use rondo::group::Group;
use rondo::sync::{
    AcquireError, AsyncOneManyLock, GroupFairError, Semaphore, SemaphorePermitArc, TryAcquireError,
};

/// Polls `fut` once inside a task of `g` (so it joins the line in `g`'s share), checks it waits,
/// and returns it for the test thread to poll by hand.
// The task hands the half-polled future back, to be polled by hand.
#[allow(clippy::async_yields_async)]
fn enqueued<F>(rt: &rondo::Runtime, g: &Group, fut: F) -> Probe<F>
where
    F: Future + Unpin + Send + 'static,
    F::Output: Send,
{
    let f = rt
        .block_on(g.spawn(async move {
            let mut f = fut;
            assert!(
                futures::poll!(&mut f).is_pending(),
                "the acquire should have waited"
            );
            f
        }))
        .unwrap();
    let mut p = Probe::new(f);
    p.pending();
    p
}

fn is_ready<F: Future>(p: &mut Probe<F>) -> Option<F::Output> {
    match p.poll() {
        Poll::Ready(v) => Some(v),
        Poll::Pending => None,
    }
}

type SemWaiter =
    Probe<Pin<Box<dyn Future<Output = Result<SemaphorePermitArc, AcquireError>> + Send + 'static>>>;

fn sem_waiter(rt: &rondo::Runtime, g: &Group, sem: &Arc<Semaphore>, n: usize) -> SemWaiter {
    let fut: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(sem.acquire_many_arc(n));
    enqueued(rt, g, fut)
}

/// With one permit passed from grant to grant, the order in which `waiters` (label, probe) are
/// served. Each granted permit is dropped at once, which serves the next.
fn grant_order(
    waiters: &mut [(&'static str, SemWaiter)],
    first: impl FnOnce(),
) -> Vec<&'static str> {
    first();
    let mut order = Vec::new();
    let mut done = vec![false; waiters.len()];
    while order.len() < waiters.len() {
        // Every waiter is polled while the granted permit is still held, then it is returned.
        let (ready, permits): (Vec<usize>, Vec<_>) = (0..waiters.len())
            .filter(|&i| !done[i])
            .filter_map(|i| is_ready(&mut waiters[i].1).map(|p| (i, p.unwrap())))
            .unzip();
        assert_eq!(
            ready.len(),
            1,
            "one permit, so one grant at a time: {ready:?}"
        );
        done[ready[0]] = true;
        order.push(waiters[ready[0]].0);
        drop(permits);
    }
    order
}

#[test]
fn zero_or_too_many_permits_are_refused_with_a_clear_error() {
    let e = Semaphore::group_fair(0).unwrap_err();
    assert_eq!(e, GroupFairError::NoPermits);
    assert!(e.to_string().contains("0 permits"), "{e}");
    assert!(e.to_string().contains("at least 1"), "{e}");
    let n = Semaphore::MAX_PERMITS + 1;
    let e = Semaphore::group_fair(n).unwrap_err();
    assert_eq!(e, GroupFairError::TooManyPermits { permits: n });
    assert!(e.to_string().contains("MAX_PERMITS"), "{e}");
    assert_eq!(
        Semaphore::group_fair(Semaphore::MAX_PERMITS)
            .unwrap()
            .available_permits(),
        Semaphore::MAX_PERMITS
    );
}

/// Weight 6 against weight 1: six grants to one, ties to the earlier waiter, FIFO within a group.
#[test]
fn grants_follow_the_weights_and_fifo_within_a_group() {
    let rt = rt(1);
    let heavy = rt.group().weight(6).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let held = sem.try_acquire().unwrap();
    let names_h = ["h1", "h2", "h3", "h4", "h5", "h6", "h7", "h8"];
    let mut waiters = vec![("l1", sem_waiter(&rt, &light, &sem, 1))];
    for name in names_h {
        waiters.push((name, sem_waiter(&rt, &heavy, &sem, 1)));
    }
    waiters.push(("l2", sem_waiter(&rt, &light, &sem, 1)));
    waiters.push(("l3", sem_waiter(&rt, &light, &sem, 1)));
    assert_eq!(sem.heaviest_waiting_weight(), 6);
    // Tags: l1 0, then l 1, 2; h1..h8 at 0, 1/6, .., 7/6. A tie goes to the earlier waiter.
    let order = grant_order(&mut waiters, || drop(held));
    assert_eq!(
        order,
        [
            "l1", "h1", "h2", "h3", "h4", "h5", "h6", "h7", "l2", "h8", "l3"
        ]
    );
    assert_eq!(sem.heaviest_waiting_weight(), 0);
    assert_eq!(sem.available_permits(), 1);
}

/// The fair mode (`new`) serves the same waiters in FIFO order: the weights change the order.
#[test]
fn the_fair_mode_ignores_the_weights() {
    let rt = rt(1);
    let heavy = rt.group().weight(6).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let sem = Arc::new(Semaphore::new(1));
    let held = sem.try_acquire().unwrap();
    let mut waiters = vec![
        ("l1", sem_waiter(&rt, &light, &sem, 1)),
        ("l2", sem_waiter(&rt, &light, &sem, 1)),
        ("h1", sem_waiter(&rt, &heavy, &sem, 1)),
    ];
    assert_eq!(sem.heaviest_waiting_weight(), 0);
    assert_eq!(grant_order(&mut waiters, || drop(held)), ["l1", "l2", "h1"]);
}

/// Waiters outside any group (the test thread itself) are one more group of weight 1.
#[test]
fn waiters_outside_any_group_share_as_one_group_of_weight_one() {
    let rt = rt(1);
    let heavy = rt.group().weight(3).build().unwrap();
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let held = sem.try_acquire().unwrap();
    let outside = |sem: &Arc<Semaphore>| -> SemWaiter {
        let fut: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(sem.acquire_arc());
        let mut p = Probe::new(fut);
        p.pending();
        p
    };
    let mut waiters = vec![("o1", outside(&sem)), ("o2", outside(&sem))];
    for name in ["h1", "h2", "h3", "h4"] {
        waiters.push((name, sem_waiter(&rt, &heavy, &sem, 1)));
    }
    assert_eq!(sem.heaviest_waiting_weight(), 3);
    assert_eq!(
        grant_order(&mut waiters, || drop(held)),
        ["o1", "h1", "h2", "h3", "o2", "h4"]
    );
}

/// A request at the front of its group waits for enough permits; it is not overtaken within its
/// group, and permits are charged per permit (a grant of 3 costs three grants of 1).
#[test]
fn many_permits_wait_whole_and_are_charged_per_permit() {
    let rt = rt(1);
    let a = rt.group().weight(1).build().unwrap();
    let b = rt.group().weight(1).build().unwrap();
    let sem = Arc::new(Semaphore::group_fair(3).unwrap());
    let held = sem.try_acquire_many(3).unwrap();
    let mut a3 = sem_waiter(&rt, &a, &sem, 3);
    let mut a1 = sem_waiter(&rt, &a, &sem, 1);
    let mut b1 = sem_waiter(&rt, &b, &sem, 1);
    let mut b1x = sem_waiter(&rt, &b, &sem, 1);
    let mut b1y = sem_waiter(&rt, &b, &sem, 1);
    let mut b1z = sem_waiter(&rt, &b, &sem, 1);
    let mut held = held;
    drop(held.split(1).unwrap());
    // a3 is first (tie, earlier) and needs 3: nobody is served past it.
    assert!(is_ready(&mut a3).is_none());
    assert!(is_ready(&mut b1).is_none());
    assert!(is_ready(&mut a1).is_none());
    drop(held);
    let p = is_ready(&mut a3).expect("a3 is served first").unwrap();
    assert_eq!(p.count(), 3);
    drop(p);
    // a was charged 3: b gets its next three grants before a1 (the tie at 3 goes to a1, earlier).
    let pb = is_ready(&mut b1).unwrap().unwrap();
    let pbx = is_ready(&mut b1x).unwrap().unwrap();
    let pby = is_ready(&mut b1y).unwrap().unwrap();
    assert!(is_ready(&mut a1).is_none());
    assert!(is_ready(&mut b1z).is_none());
    drop(pb);
    assert!(
        is_ready(&mut b1z).is_none(),
        "a1's tag ties b's and a1 waited first"
    );
    let pa = is_ready(&mut a1).unwrap().unwrap();
    drop((pa, pbx, pby));
    assert!(is_ready(&mut b1z).unwrap().is_ok());
}

/// A waiter dropped while waiting leaves without a charge; one dropped after its grant passes the
/// grant on to the next waiter the queue picks.
#[test]
fn cancelled_waiters_pass_their_grant_on_and_are_not_charged() {
    let rt = rt(1);
    let heavy = rt.group().weight(2).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let held = sem.try_acquire().unwrap();
    let h1 = sem_waiter(&rt, &heavy, &sem, 1);
    let mut l1 = sem_waiter(&rt, &light, &sem, 1);
    let mut h2 = sem_waiter(&rt, &heavy, &sem, 1);
    let mut h3 = sem_waiter(&rt, &heavy, &sem, 1);
    // h1 is picked first and granted; dropped before it polls, it passes the permit on: to l1
    // (tags: heavy 1/2 after h1's charge, light 0).
    drop(held);
    drop(h1);
    assert_eq!(l1.wakes(), 1, "the grant passed on to l1");
    let pl = is_ready(&mut l1).unwrap().unwrap();
    // h2 is cancelled while waiting: no charge, so h3 now heads the heavy group at 1/2.
    drop(h2.poll());
    drop(h2);
    drop(pl);
    assert!(is_ready(&mut h3).unwrap().is_ok());
    assert_eq!(sem.heaviest_waiting_weight(), 0);
}

#[test]
fn close_fails_every_waiter_of_every_group() {
    let rt = rt(1);
    let g1 = rt.group().weight(5).build().unwrap();
    let g2 = rt.group().weight(1).build().unwrap();
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let held = sem.try_acquire().unwrap();
    let mut w = [
        sem_waiter(&rt, &g1, &sem, 1),
        sem_waiter(&rt, &g2, &sem, 1),
        sem_waiter(&rt, &g1, &sem, 1),
    ];
    assert_eq!(sem.heaviest_waiting_weight(), 5);
    sem.close();
    assert_eq!(sem.heaviest_waiting_weight(), 0);
    for p in &mut w {
        assert_eq!(p.wakes(), 1);
        assert!(is_ready(p).unwrap().is_err());
    }
    drop(held);
    assert_eq!(sem.try_acquire().unwrap_err(), TryAcquireError::Closed);
}

/// `add_permits` serves as many waiters as the new permits cover, in the queue's order; while
/// anyone waits, `try_acquire` fails even with permits free (no barging).
#[test]
fn add_permits_serves_by_weight_and_newcomers_do_not_barge() {
    let rt = rt(1);
    let heavy = rt.group().weight(4).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let held = sem.try_acquire().unwrap();
    let mut l1 = sem_waiter(&rt, &light, &sem, 1);
    let mut l2 = sem_waiter(&rt, &light, &sem, 1);
    let mut h1 = sem_waiter(&rt, &heavy, &sem, 1);
    let mut h2 = sem_waiter(&rt, &heavy, &sem, 2);
    sem.add_permits(2);
    // l1 (tie, earlier) and h1; h2 (heavy at 1/4) is next and needs 2, so l2 waits behind it.
    let p1 = is_ready(&mut l1).unwrap().unwrap();
    let p2 = is_ready(&mut h1).unwrap().unwrap();
    assert!(is_ready(&mut h2).is_none());
    assert!(is_ready(&mut l2).is_none());
    drop(p1);
    assert_eq!(sem.available_permits(), 1);
    assert_eq!(
        sem.try_acquire().unwrap_err(),
        TryAcquireError::NoPermits,
        "a newcomer took a permit past the line"
    );
    drop(p2);
    assert_eq!(is_ready(&mut h2).unwrap().unwrap().count(), 2);
    assert!(is_ready(&mut l2).unwrap().is_ok());
    drop(held);
    assert_eq!(sem.available_permits(), 3);
}

/// The `_blocking` and owned variants wait in the line like any other waiter (outside any group).
#[test]
fn blocking_and_owned_acquires_wait_in_the_queue() {
    let rt = rt(1);
    let heavy = rt.group().weight(2).build().unwrap();
    let sem = Arc::new(Semaphore::group_fair(1).unwrap());
    let held = sem.try_acquire_arc().unwrap();
    let mut h1 = sem_waiter(&rt, &heavy, &sem, 1);
    let s2 = Arc::clone(&sem);
    let blocked = std::thread::spawn(move || s2.acquire_arc_blocking().unwrap().count());
    assert!(common::eventually(10, || sem.heaviest_waiting_weight() == 2));
    // The blocking waiter joins the outside share; give it time to be in line, then release.
    std::thread::sleep(Duration::from_millis(20));
    drop(held);
    let p = is_ready(&mut h1).unwrap().unwrap();
    drop(p);
    assert_eq!(blocked.join().unwrap(), 1);
    assert_eq!(sem.available_permits(), 1);
}

type LockWaiter<G> = Probe<Pin<Box<dyn Future<Output = G> + Send + 'static>>>;

fn writer(
    rt: &rondo::Runtime,
    g: &Group,
    lock: &Arc<AsyncOneManyLock<Vec<&'static str>>>,
) -> LockWaiter<rondo::sync::ExclusiveGuardArc<Vec<&'static str>>> {
    let fut: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(lock.exclusive_arc());
    enqueued(rt, g, fut)
}

fn reader(
    rt: &rondo::Runtime,
    g: &Group,
    lock: &Arc<AsyncOneManyLock<Vec<&'static str>>>,
) -> LockWaiter<rondo::sync::SharedGuardArc<Vec<&'static str>>> {
    let fut: Pin<Box<dyn Future<Output = _> + Send>> = Box::pin(lock.shared_arc());
    enqueued(rt, g, fut)
}

/// Writers of a weight-3 group against writers of a weight-1 group: three to one.
#[test]
fn the_lock_grants_writers_by_weight() {
    let rt = rt(1);
    let heavy = rt.group().weight(3).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let lock = Arc::new(AsyncOneManyLock::group_fair(Vec::new()));
    let held = lock.try_exclusive_arc().unwrap();
    let mut ws: Vec<(&str, _)> = Vec::new();
    for name in ["l1", "l2"] {
        ws.push((name, writer(&rt, &light, &lock)));
    }
    for name in ["h1", "h2", "h3", "h4"] {
        ws.push((name, writer(&rt, &heavy, &lock)));
    }
    assert_eq!(lock.heaviest_waiting_weight(), 3);
    drop(held);
    let mut order = Vec::new();
    while order.len() < ws.len() {
        // Every waiter is polled while the granted guard is still held, then it is released.
        let mut granted = Vec::new();
        for (name, w) in &mut ws {
            if order.contains(name) {
                continue;
            }
            if let Some(mut g) = is_ready(w) {
                g.push(name);
                granted.push((*name, g));
            }
        }
        assert_eq!(granted.len(), 1, "one writer at a time");
        order.push(granted[0].0);
        drop(granted);
    }
    assert_eq!(order, ["l1", "h1", "h2", "h3", "l2", "h4"]);
    assert_eq!(*lock.try_shared().unwrap(), order);
    assert_eq!(lock.heaviest_waiting_weight(), 0);
}

/// Readers picked in a row are admitted as one batch; the first writer picked ends the batch and
/// readers picked after it wait for it: batches and writers alternate, in the weights' order.
#[test]
fn the_lock_admits_readers_in_batches_that_alternate_with_writers() {
    let rt = rt(1);
    let heavy = rt.group().weight(2).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let lock = Arc::new(AsyncOneManyLock::group_fair(Vec::new()));
    let held = lock.try_exclusive_arc().unwrap();
    // Queue: light r1, w1, r2 and heavy r1, r2, w1, r3. Tags (light 1 per grant, heavy 1/2):
    // picks l.r1 (0, earliest), h.r1 (0), h.r2 (1/2), then l.w1 and h.w1 tie at 1: l.w1 (earlier).
    let mut lr1 = reader(&rt, &light, &lock);
    let mut lw1 = writer(&rt, &light, &lock);
    let mut lr2 = reader(&rt, &light, &lock);
    let mut hr1 = reader(&rt, &heavy, &lock);
    let mut hr2 = reader(&rt, &heavy, &lock);
    let mut hw1 = writer(&rt, &heavy, &lock);
    let mut hr3 = reader(&rt, &heavy, &lock);
    drop(held);
    // Batch 1: three readers.
    let batch1 = [
        is_ready(&mut lr1).unwrap(),
        is_ready(&mut hr1).unwrap(),
        is_ready(&mut hr2).unwrap(),
    ];
    assert!(is_ready(&mut lw1).is_none());
    assert!(is_ready(&mut hw1).is_none());
    assert!(
        is_ready(&mut lr2).is_none(),
        "a reader got past the writer that ended the batch"
    );
    assert!(
        is_ready(&mut hr3).is_none(),
        "a reader got past the writer that ended the batch"
    );
    drop(batch1);
    // The writer picked, alone.
    let w = is_ready(&mut lw1).unwrap();
    assert!(is_ready(&mut hw1).is_none());
    assert!(is_ready(&mut hr3).is_none());
    drop(w);
    // Tags now: light 2, heavy 1: h.w1 (1).
    let w = is_ready(&mut hw1).unwrap();
    assert!(is_ready(&mut hr3).is_none());
    drop(w);
    // Batch 2: h.r3 (3/2) and l.r2 (2).
    let batch2 = [is_ready(&mut hr3).unwrap(), is_ready(&mut lr2).unwrap()];
    drop(batch2);
    assert!(lock.try_exclusive().is_some());
}

/// An upgrade waits at the front, in every mode: it is served before any group's waiter.
#[test]
fn an_upgrade_goes_first() {
    let rt = rt(1);
    let heavy = rt.group().weight(9).build().unwrap();
    let lock = Arc::new(AsyncOneManyLock::group_fair(Vec::new()));
    let up = lock.try_upgradable_arc().unwrap();
    let reader_held = lock.try_shared_arc().unwrap();
    let mut hw = writer(&rt, &heavy, &lock);
    let mut upgrade = Probe::new(Box::pin(up.upgrade()));
    upgrade.pending();
    drop(reader_held);
    let mut g = is_ready(&mut upgrade).expect("the upgrade is served first");
    g.push("up");
    assert!(is_ready(&mut hw).is_none());
    drop(g);
    assert!(is_ready(&mut hw).is_some());
}

/// A waiting writer cancelled after its grant passes the lock on; the readers behind it get in.
#[test]
fn the_lock_passes_a_cancelled_grant_on() {
    let rt = rt(1);
    let a = rt.group().weight(1).build().unwrap();
    let b = rt.group().weight(1).build().unwrap();
    let lock = Arc::new(AsyncOneManyLock::group_fair(Vec::new()));
    let held = lock.try_exclusive_arc().unwrap();
    let w = writer(&rt, &a, &lock);
    let mut r = reader(&rt, &b, &lock);
    drop(held);
    assert!(is_ready(&mut r).is_none());
    drop(w);
    assert!(is_ready(&mut r).is_some());
}

/// The acceptance scenario, shortened: a weight-6 and a weight-1 group, 100 tasks each, on a
/// 2-permit group-fair semaphore; each holder spins 100 µs, then sleeps 200 µs. The weight-1
/// group's share of the first 100 grants is 14 ± 5 (six to one). At 1 worker and at `rt(2)`'s
/// count.
#[test]
fn weighted_shares_of_a_semaphore_under_load() {
    for workers in [1, 2] {
        let sem = Arc::new(Semaphore::group_fair(2).unwrap());
        let light = weighted_run(workers, Target::Sem(sem));
        assert!(
            (9..=19).contains(&light),
            "{workers} workers: the weight-1 group got {light} of the first 100 grants"
        );
    }
}

/// The same with the lock, in write mode.
#[test]
fn weighted_shares_of_a_lock_under_load() {
    for workers in [1, 2] {
        let lock = Arc::new(AsyncOneManyLock::group_fair(()));
        let light = weighted_run(workers, Target::Lock(lock));
        assert!(
            (9..=19).contains(&light),
            "{workers} workers: the weight-1 group got {light} of the first 100 grants"
        );
    }
}

#[derive(Clone)]
enum Target {
    Sem(Arc<Semaphore>),
    Lock(Arc<AsyncOneManyLock<()>>),
}

impl Target {
    /// Acquires, logs the grant, works while holding, releases.
    async fn hold(self, log: Arc<Mutex<Vec<bool>>>, is_light: bool) {
        let work = || async {
            log.lock().unwrap().push(is_light);
            spin(Duration::from_micros(100));
            rondo::time::sleep(Duration::from_micros(200)).await;
        };
        match self {
            Target::Sem(sem) => {
                let _p = sem.acquire().await.unwrap();
                work().await;
            }
            Target::Lock(lock) => {
                let _g = lock.exclusive().await;
                work().await;
            }
        }
    }
}

/// Runs 100 tasks in a weight-6 group and 100 in a weight-1 group (spawned alternately), each
/// holding `target` once. Returns how many of the first 100 grants went to the weight-1 group.
fn weighted_run(workers: usize, target: Target) -> usize {
    let rt = rt(workers);
    let heavy = rt.group().weight(6).build().unwrap();
    let light = rt.group().weight(1).build().unwrap();
    let log = Arc::new(Mutex::new(Vec::new()));
    let handles: Vec<_> = (0..200)
        .map(|i| {
            let is_light = i % 2 == 1;
            let g = if is_light { &light } else { &heavy };
            g.spawn(target.clone().hold(Arc::clone(&log), is_light))
        })
        .collect();
    watchdog(60, move || {
        rt.block_on(async {
            for h in handles {
                h.await.unwrap();
            }
        })
    });
    let log = log.lock().unwrap();
    assert_eq!(log.len(), 200);
    log.iter().take(100).filter(|&&l| l).count()
}

/// Many tasks in three groups, and a thread outside any group, take and release the semaphore and
/// the lock in a loop, the tasks cancelling some of their waits half-way; nobody is left waiting for ever (the
/// watchdog) and the counts stay exact.
#[test]
fn no_lost_wakeups_under_stress() {
    for workers in [1, 2] {
        stress(workers);
    }
}

fn stress(workers: usize) {
    let rt = rt(workers);
    let groups: Vec<Group> = [1, 3, 8]
        .iter()
        .map(|&w| rt.group().weight(w).build().unwrap())
        .collect();
    let sem = Arc::new(Semaphore::group_fair(3).unwrap());
    let lock = Arc::new(AsyncOneManyLock::group_fair(0u64));
    let inside = Arc::new(AtomicUsize::new(0));
    let writing = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    const TASKS: usize = 60;
    const OPS: u64 = 300;
    for t in 0..TASKS {
        let (sem, lock, inside, writing) = (
            Arc::clone(&sem),
            Arc::clone(&lock),
            Arc::clone(&inside),
            Arc::clone(&writing),
        );
        handles.push(groups[t % 3].spawn(async move {
            let mut writes = 0u64;
            for op in 0..OPS {
                if op % 7 == 3 {
                    // A cancelled wait: polled once, dropped.
                    let f = sem.acquire_many(2);
                    futures::pin_mut!(f);
                    let _ = futures::poll!(f.as_mut());
                    let l = lock.exclusive();
                    futures::pin_mut!(l);
                    let _ = futures::poll!(l.as_mut());
                    continue;
                }
                {
                    let _p = sem.acquire().await.unwrap();
                    assert!(inside.fetch_add(1, Ordering::SeqCst) < 3);
                    if op % 5 == 0 {
                        rondo::yield_now().await;
                    }
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
                if op % 3 == 0 {
                    let mut g = lock.exclusive().await;
                    assert!(!writing.swap(true, Ordering::SeqCst));
                    *g += 1;
                    writes += 1;
                    if op % 9 == 0 {
                        rondo::yield_now().await;
                    }
                    writing.store(false, Ordering::SeqCst);
                } else {
                    let g = lock.shared().await;
                    assert!(!writing.load(Ordering::SeqCst));
                    let _ = *g;
                    if op % 4 == 0 {
                        rondo::yield_now().await;
                    }
                }
            }
            writes
        }));
    }
    // A thread outside the runtime waits in the outside share, with the blocking methods.
    let outside = {
        let (sem, lock, inside, writing) = (
            Arc::clone(&sem),
            Arc::clone(&lock),
            Arc::clone(&inside),
            Arc::clone(&writing),
        );
        std::thread::spawn(move || {
            for op in 0..OPS {
                {
                    let _p = sem.acquire_blocking().unwrap();
                    assert!(inside.fetch_add(1, Ordering::SeqCst) < 3);
                    inside.fetch_sub(1, Ordering::SeqCst);
                }
                if op % 2 == 0 {
                    let mut g = lock.exclusive_blocking();
                    assert!(!writing.swap(true, Ordering::SeqCst));
                    *g += 1;
                    writing.store(false, Ordering::SeqCst);
                } else {
                    let g = lock.shared_blocking();
                    assert!(!writing.load(Ordering::SeqCst));
                    let _ = *g;
                }
            }
            OPS / 2
        })
    };
    let total = watchdog(120, move || {
        let tasks: u64 = rt.block_on(async {
            let mut total = 0;
            for h in handles {
                total += h.await.unwrap();
            }
            total
        });
        tasks + outside.join().unwrap()
    });
    assert_eq!(*lock.try_shared().unwrap(), total);
    assert_eq!(sem.available_permits(), 3);
    assert_eq!(sem.heaviest_waiting_weight(), 0);
    assert_eq!(lock.heaviest_waiting_weight(), 0);
}

/// With tenant trees, a tenant's nested groups wait in the tenant's share: a tenant with many
/// connection groups gets no more grants than its weight says.
#[test]
fn nested_groups_wait_in_their_tenants_share() {
    watchdog(60, || {
        let rt = rondo::Runtime::builder().worker_threads(2).build().unwrap();
        let sem = Arc::new(rondo::sync::Semaphore::group_fair(1).unwrap());
        let a = rt.group().weight(1).build().unwrap();
        let b = rt.group().weight(1).build().unwrap();
        let grants = Arc::new(std::sync::Mutex::new(Vec::new()));
        let hold = sem.try_acquire_arc().unwrap();
        let mut hs = Vec::new();
        // Tenant A waits from 8 connection groups with 4 tasks each, B from 1 group with 4.
        for (tenant, conns, name) in [(&a, 8, 'a'), (&b, 1, 'b')] {
            for _ in 0..conns {
                let conn = tenant.child().build().unwrap();
                for _ in 0..4 {
                    let (sem, grants) = (sem.clone(), grants.clone());
                    hs.push(conn.spawn(async move {
                        let _p = sem.acquire().await.unwrap();
                        grants.lock().unwrap().push(name);
                    }));
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        drop(hold);
        rt.block_on(async {
            for h in hs {
                h.await.unwrap();
            }
        });
        let grants = grants.lock().unwrap().clone();
        let b_in_first_8 = grants[..8].iter().filter(|&&c| c == 'b').count();
        assert_eq!(b_in_first_8, 4, "grants: {grants:?}");
    });
}
